package redisauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"go.uber.org/zap"
)

// The AWS services whose Redis-compatible caches take IAM auth tokens,
// as AWSOptions.Service names them (and SigV4 signs for them).
const (
	ServiceElastiCache = "elasticache"
	ServiceMemoryDB    = "memorydb"
)

// AWS IAM auth tokens are valid for 15 minutes from signing (X-Amz-Expires
// is at most 900 for these services). A token is only checked when a
// connection authenticates with it, so a connection outlives its token;
// AWS closes it after 12 hours (AWSConnMaxLifetime stays under that).
const (
	awsTokenLifetime = 15 * time.Minute
	// awsRefreshEvery is how often AWSToken.Run signs a new token, so
	// that a new connection gets a token with 10 minutes or more left,
	// ample for clock skew.
	awsRefreshEvery = 5 * time.Minute
	// awsReuse is how old a token may be before Credentials signs a new
	// one itself, if Run has not (it failed, or is not running).
	awsReuse = 10 * time.Minute
	// awsRefreshTimeout bounds one refresh by Run, which may have to
	// fetch the credentials (from STS, or the instance's metadata).
	awsRefreshTimeout = 30 * time.Second
)

// AWSConnMaxLifetime is the connection lifetime to use with IAM tokens:
// AWS closes an IAM-authenticated connection after 12 hours, in the
// middle of whatever request it carries; the store closes it first,
// between requests.
const AWSConnMaxLifetime = 11 * time.Hour

// emptySHA256 is the hex SHA-256 of an empty payload, which a presigned
// GET signs.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// AWSOptions says whose IAM auth tokens to sign.
type AWSOptions struct {
	// Service is ServiceElastiCache or ServiceMemoryDB.
	Service string
	// Name is the ElastiCache replication group ID or serverless cache
	// name, or the MemoryDB cluster name. ElastiCache wants it in lower
	// case.
	Name string
	// User is the IAM-enabled user: for ElastiCache its user ID, which
	// must equal its user name; for MemoryDB its user name. It is also
	// the user name that connections authenticate as.
	User string
	// Serverless marks an ElastiCache Serverless cache, whose tokens name
	// the resource type.
	Serverless bool
	// Region is the cache's AWS region; "" means the SDK's (AWS_REGION,
	// or the profile's).
	Region string
	// Credentials signs the tokens; nil means the SDK's default chain
	// (environment, web identity as in EKS IRSA, Pod Identity, profiles,
	// ECS, EC2 instance metadata).
	Credentials aws.CredentialsProvider
	// Now is the clock that signs; nil means time.Now. For tests.
	Now func() time.Time
	// Log takes refresh failures; nil logs nothing.
	Log *zap.Logger
}

// AWSToken is the credentials of an ElastiCache or MemoryDB user that
// authenticates with IAM: the user name, and a token presigned with
// SigV4 by the AWS SDK, as AWS documents it. It is a redis.Credentials,
// safe for concurrent use; Run keeps its token fresh.
type AWSToken struct {
	service, name, user, region string
	serverless                  bool
	creds                       aws.CredentialsProvider
	signer                      *v4.Signer
	now                         func() time.Time
	log                         *zap.Logger

	mu    sync.Mutex
	token string
	at    time.Time // when token was signed

	signed, failures atomic.Uint64
}

// NewAWSToken returns the credentials o describes. It loads the SDK's
// default configuration for what o leaves out, but fetches no credentials
// yet: the first connection (or Run) does.
func NewAWSToken(ctx context.Context, o AWSOptions) (*AWSToken, error) {
	var errs []error
	if o.Service != ServiceElastiCache && o.Service != ServiceMemoryDB {
		errs = append(errs, fmt.Errorf("AWS service %q: want %s or %s", o.Service, ServiceElastiCache, ServiceMemoryDB))
	}
	if o.Serverless && o.Service != ServiceElastiCache {
		errs = append(errs, errors.New("only ElastiCache has serverless caches"))
	}
	if o.Name == "" {
		errs = append(errs, errors.New("no cache name (replication group ID, serverless cache name or MemoryDB cluster name)"))
	}
	if o.User == "" {
		errs = append(errs, errors.New("no user: IAM tokens are for a named user"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t := &AWSToken{
		service: o.Service, name: o.Name, user: o.User, region: o.Region, serverless: o.Serverless,
		creds: o.Credentials, signer: v4.NewSigner(), now: o.Now, log: o.Log,
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.log == nil {
		t.log = zap.NewNop()
	}
	if t.creds == nil || t.region == "" {
		var opts []func(*awsconfig.LoadOptions) error
		if o.Region != "" {
			opts = append(opts, awsconfig.WithRegion(o.Region))
		}
		cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("load AWS configuration: %w", err)
		}
		if t.creds == nil {
			t.creds = cfg.Credentials
		}
		t.region = cfg.Region
	}
	if t.region == "" {
		return nil, errors.New("no AWS region: set one, or AWS_REGION")
	}
	return t, nil
}

// Credentials returns the user and a token signed in the last
// awsRefreshEvery (by Run), or signs one if the last is older than
// awsReuse.
func (t *AWSToken) Credentials(ctx context.Context) (username, password string, err error) {
	t.mu.Lock()
	tok, at := t.token, t.at
	t.mu.Unlock()
	if tok != "" && t.now().Sub(at) < awsReuse {
		return t.user, tok, nil
	}
	tok, err = t.refresh(ctx)
	if err != nil {
		return "", "", err
	}
	return t.user, tok, nil
}

// refresh signs a new token and keeps it.
func (t *AWSToken) refresh(ctx context.Context) (string, error) {
	now := t.now()
	tok, err := t.sign(ctx, now)
	if err != nil {
		t.failures.Add(1)
		return "", fmt.Errorf("sign AWS IAM auth token for %s %s: %w", t.service, t.name, err)
	}
	t.signed.Add(1)
	t.mu.Lock()
	if now.After(t.at) {
		t.token, t.at = tok, now
	}
	t.mu.Unlock()
	return tok, nil
}

// Changes returns how many tokens t has signed.
func (t *AWSToken) Changes() uint64 { return t.signed.Load() }

// Failures returns how often t could not sign a token.
func (t *AWSToken) Failures() uint64 { return t.failures.Load() }

// sign returns a token signed at now: the URL of a GET of
// http://<name>/?Action=connect&User=<user>, presigned for the service
// to expire in awsTokenLifetime, without its scheme.
func (t *AWSToken) sign(ctx context.Context, now time.Time) (string, error) {
	creds, err := t.creds.Retrieve(ctx)
	if err != nil {
		return "", err
	}
	q := url.Values{"Action": {"connect"}, "User": {t.user}}
	if t.serverless {
		q.Set("ResourceType", "ServerlessCache")
	}
	q.Set("X-Amz-Expires", fmt.Sprint(int(awsTokenLifetime/time.Second)))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, (&url.URL{Scheme: "http", Host: t.name, Path: "/", RawQuery: q.Encode()}).String(), nil)
	if err != nil {
		return "", err
	}
	signed, _, err := t.signer.PresignHTTP(ctx, creds, req, emptySHA256, t.service, t.region, now)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(signed, "http://"), nil
}

// Run signs a new token now and every awsRefreshEvery until ctx ends,
// so that connections never wait for one. A failure is logged; the
// token signed before stays in use until Credentials finds it too old.
func (t *AWSToken) Run(ctx context.Context) {
	tick := time.NewTicker(awsRefreshEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, awsRefreshTimeout)
		_, err := t.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.log.Warn("AWS IAM auth token not refreshed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
