package redisauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gcptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestGCPTokenAuthenticates: with Application Default Credentials from
// GOOGLE_APPLICATION_CREDENTIALS (a service account whose token server is
// on loopback), connections authenticate to the default user with the
// access token as password, asked for with the cloud-platform scope, and
// the token is fetched once, not per connection.
func TestGCPTokenAuthenticates(t *testing.T) {
	ts := gcptest.NewTokenServer(t)
	ts.Setenv(t)
	g, err := redisauth.NewGCPToken("", nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client(t).ConfigSet(ctx, "requirepass", "tok-1").Err(); err != nil {
		t.Fatal(err)
	}
	st, err := redis.New(ctx, redis.Options{URL: "redis://" + s.Addr, Credentials: g, ConnMaxLifetime: time.Nanosecond, Timeout: testTimeout, KeyPrefix: "gcp:"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer st.Close()
	l, err := limits.NewLimit(limits.FixedWindow, 100, limits.UnitHour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // a new connection each
		b := &limits.Batch{Checks: []limits.Check{{Key: "{k}gcp", Limit: l, Hits: 1}}}
		if err := st.Apply(ctx, b); err != nil || !b.Admitted {
			t.Fatalf("Apply: admitted %v, %v", b.Admitted, err)
		}
	}
	if n := ts.Grants(); n != 1 {
		t.Errorf("token requests: %d, want 1 (the token is cached)", n)
	}
	if got := ts.Scope(); got != "https://www.googleapis.com/auth/cloud-platform" {
		t.Errorf("scope %q, want cloud-platform", got)
	}
	if g.Changes() != 1 || g.Failures() != 0 {
		t.Errorf("changes %d, failures %d; want 1 and 0", g.Changes(), g.Failures())
	}
}

// TestGCPTokenFailure: a token server that refuses fails the connection
// with the error, counted.
func TestGCPTokenFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
	}))
	defer srv.Close()
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", gcptest.ServiceAccountFile(t, srv.URL))
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	g, err := redisauth.NewGCPToken("", nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Credentials(context.Background()); err == nil || !strings.Contains(err.Error(), "google access token") {
		t.Errorf("Credentials: %v, want the token error", err)
	}
	if g.Failures() != 1 {
		t.Errorf("failures %d, want 1", g.Failures())
	}
}
