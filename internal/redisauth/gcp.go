package redisauth

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"go.uber.org/zap"
)

// gcpScope is the OAuth scope of the access tokens that Memorystore's IAM
// authentication takes.
const gcpScope = "https://www.googleapis.com/auth/cloud-platform"

// gcpRefreshEvery is how often GCPToken.Run asks for the token, so that
// Google's library refreshes it in the background before it goes stale
// (3m45s before its expiry, an hour after it was issued) and a new
// connection never waits for the token server.
const gcpRefreshEvery = time.Minute

// GCPToken is the credentials of a Memorystore (for Redis Cluster, or for
// Valkey) with IAM authentication: an OAuth 2.0 access token of Google's
// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, GKE
// Workload Identity, the metadata server), as the password of the default
// user or of User. It is a redis.Credentials, safe for concurrent use;
// Run keeps its token fresh. Memorystore checks the token when a
// connection authenticates; a connection outlives it.
type GCPToken struct {
	user  string
	creds *auth.Credentials
	log   *zap.Logger

	mu   sync.Mutex
	last string // the last token handed out, to count changes

	changes, failures atomic.Uint64
}

// NewGCPToken returns the credentials of user ("": the default user)
// with the tokens of creds, or of Application Default Credentials if
// creds is nil. It asks for no token yet.
func NewGCPToken(user string, creds *auth.Credentials, log *zap.Logger) (*GCPToken, error) {
	if creds == nil {
		var err error
		creds, err = credentials.DetectDefault(&credentials.DetectOptions{Scopes: []string{gcpScope}})
		if err != nil {
			return nil, fmt.Errorf("google application default credentials: %w", err)
		}
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &GCPToken{user: user, creds: creds, log: log}, nil
}

// Credentials returns the user and a current access token: the cached one
// unless it has expired.
func (g *GCPToken) Credentials(ctx context.Context) (username, password string, err error) {
	tok, err := g.creds.Token(ctx)
	if err != nil {
		g.failures.Add(1)
		return "", "", fmt.Errorf("google access token: %w", err)
	}
	g.mu.Lock()
	if tok.Value != g.last {
		g.last = tok.Value
		g.changes.Add(1)
	}
	g.mu.Unlock()
	return g.user, tok.Value, nil
}

// Changes returns how many different tokens g has handed out.
func (g *GCPToken) Changes() uint64 { return g.changes.Load() }

// Failures returns how often g could not get a token.
func (g *GCPToken) Failures() uint64 { return g.failures.Load() }

// Run asks for the token now and every gcpRefreshEvery until ctx ends, so
// that it is refreshed before connections need it. A failure is logged.
func (g *GCPToken) Run(ctx context.Context) {
	tick := time.NewTicker(gcpRefreshEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, awsRefreshTimeout)
		_, _, err := g.Credentials(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Warn("google access token not refreshed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
