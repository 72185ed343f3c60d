package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// These tests drive RLQS through the whole sidecar (flags, store wiring,
// listener, TLS, rule reloads) with internal/rlqstest playing Envoy's
// rate_limit_quota filter. Windows are a day long: a grant taken in the
// last seconds of its window is answered DENY_ALL instead (docs/rlqs.md),
// and a day makes that a 2-in-86,400 chance per grant, not 2 in 60.

// rlqsRules is the rule file of these tests: domain edge, a bucket
// {user: <any>} served as a fixed window of 1000 a day, leased 8 hits at
// most, so every grant is small and quick to spend. %s is put before
// descriptors (a failure_mode line, or nothing).
const rlqsRules = "domain: edge\n%sdescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n"

var alice = map[string]string{"user": "alice"}

// grpcConn returns a client of addr over TLS with cfg, or plaintext if
// cfg is nil, closed when the test ends.
func grpcConn(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rlqsEnvoy opens an RLQS stream on conn for domain as Envoy's filter
// with no_assignment_behavior DENY_ALL, on the clock clk (real time if
// nil). The stream ends with the test, or after 30 s, so that a server
// that stops answering fails the test instead of hanging it.
func rlqsEnvoy(t *testing.T, conn grpc.ClientConnInterface, domain string, clk *storetest.Clock) (*rlqstest.Envoy, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var o rlqstest.Options
	if clk != nil {
		o.Now = clk.Now
	}
	e, err := rlqstest.Dial(ctx, conn, domain, o)
	if err != nil {
		cancel()
		return nil, err
	}
	t.Cleanup(func() {
		e.Close()
		cancel()
	})
	return e, nil
}

// subscribe sends the bucket's first request, which subscribes it, and
// returns the strategy the sidecar assigned in answer.
func subscribe(e *rlqstest.Envoy, id map[string]string) (*typev3.RateLimitStrategy, error) {
	if _, err := e.Request(id); err != nil {
		return nil, err
	}
	return e.Strategy(id), nil
}

// spend makes requests into bucket id until one is denied (at most
// 10,000, which no grant of these tests reaches) and returns how many
// were allowed.
func spend(t *testing.T, e *rlqstest.Envoy, id map[string]string) int {
	t.Helper()
	for n := range 10_000 {
		ok, err := e.Request(id)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return n
		}
	}
	t.Fatalf("bucket %v: 10,000 requests allowed in a row; want its grant spent", id)
	return 0
}

// describe names a strategy for messages and comparisons.
func describe(s *typev3.RateLimitStrategy) string {
	switch {
	case s == nil:
		return "no assignment"
	case s.GetTokenBucket() != nil:
		return fmt.Sprintf("token_bucket of %d tokens", s.GetTokenBucket().GetMaxTokens())
	case s.GetStrategy() == nil:
		return "an empty strategy"
	}
	return s.GetBlanketRule().String()
}

// tokens is the size of s's token bucket, 0 if s is not one.
func tokens(s *typev3.RateLimitStrategy) uint32 {
	return s.GetTokenBucket().GetMaxTokens()
}

// TestRLQSOverTLS: RLQS is served on the RLS listener and under its TLS:
// a TLS stream gets quota assignments, and RLS answers on the same
// connection; a plaintext stream is refused, and with a client CA so is
// a client without a certificate the CA signed.
func TestRLQSOverTLS(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	ca, other := certtest.NewCA(t, dir, "ca"), certtest.NewCA(t, dir, "other")
	server, envoy, stranger := ca.Issue(t, "server"), ca.Issue(t, "envoy"), other.Issue(t, "stranger")
	tlsArgs := []string{"--grpc-tls-cert", server.CertFile, "--grpc-tls-key", server.KeyFile}
	tests := []struct {
		name    string
		args    []string
		client  *tls.Config
		refused map[string]*tls.Config // nil: plaintext
	}{
		{
			name:    "tls",
			args:    tlsArgs,
			client:  ca.ClientConfig(t, nil),
			refused: map[string]*tls.Config{"plaintext": nil},
		},
		{
			name:   "mutual tls",
			args:   append(append([]string{}, tlsArgs...), "--grpc-tls-client-ca", ca.File),
			client: ca.ClientConfig(t, &envoy),
			refused: map[string]*tls.Config{
				"plaintext":                        nil,
				"no client certificate":            ca.ClientConfig(t, nil),
				"client certificate of another CA": ca.ClientConfig(t, &stranger),
			},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: append([]string{"--redis-url", "redis://" + srv.Addr}, append(tt.args, "--redis-key-prefix", fmt.Sprintf("rlqs-tls-%d:", i))...)})
			conn := grpcConn(t, s.grpcAddr, tt.client)
			e, err := rlqsEnvoy(t, conn, "edge", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := subscribe(e, alice)
			if err != nil {
				t.Fatalf("RLQS over TLS: %v", err)
			}
			if n := tokens(got); n < 1 || n > 8 {
				t.Errorf("RLQS over TLS assigned %s; want a token bucket of 1 to 8 tokens (the lease)", describe(got))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, userRequest("bob", 1))
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("RLS on the connection RLQS used: %v, %v; want OK", resp, err)
			}
			for name, cfg := range tt.refused {
				e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, cfg), "edge", nil)
				if err == nil {
					_, err = subscribe(e, alice)
				}
				if err == nil {
					err = e.Err() // refused before the subscription went out
				}
				if status.Code(err) != codes.Unavailable {
					t.Errorf("%s: RLQS stream got %v; want it refused (Unavailable)", name, err)
				}
			}
		})
	}
}

// TestRLQSOnTheMemoryStore: the embedded memory store cannot grant quota
// a fleet shares, so a sidecar without Redis does not serve RLQS and
// Envoy's stream ends with Unimplemented, while RLS answers.
func TestRLQSOnTheMemoryStore(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf(rlqsRules, ""))
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir}})
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err == nil {
		_, err = subscribe(e, alice)
	}
	if err == nil {
		err = e.Err() // refused before the subscription went out
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("RLQS on the memory store: %v; want Unimplemented", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("bob", 1)); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("RLS on the memory store: %v, %v; want OK", resp, err)
	}
}

// TestRLQSRedisDown kills Redis while an Envoy holds a grant. The grant
// stands until it is spent; the next report needs the store, and the
// domain's failure mode (from its rule file, else --failure-mode)
// decides the assignment: open allows all and closed denies all, each
// for at most 10 s and sent again at every report, on the same stream.
// Once Redis is back, the bucket gets quota again.
func TestRLQSRedisDown(t *testing.T) {
	tests := []struct {
		name   string
		domain string // the rule file's failure_mode, or empty
		flag   string
		want   string // describe() of the assignment while Redis is down
	}{
		{name: "domain open", domain: "open", flag: "closed", want: "ALLOW_ALL"},
		{name: "flag open", flag: "open", want: "ALLOW_ALL"},
		{name: "domain closed", domain: "closed", flag: "open", want: "DENY_ALL"},
		{name: "flag closed", flag: "closed", want: "DENY_ALL"},
		// docs/rlqs.md: every mode but open denies all.
		{name: "domain error", domain: "error", flag: "open", want: "DENY_ALL"},
		// The memory store's share: 1000 a day over 4 replicas.
		{name: "domain local", domain: "local", flag: "open", want: "a token bucket of 1 to 250 tokens"},
	}
	const granted = `ratelimit_sidecar_rlqs_granted_hits_total{domain="edge",store=`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			mode := ""
			if tt.domain != "" {
				mode = "failure_mode: " + tt.domain + "\n"
			}
			s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, mode), args: []string{"--redis-url", "redis://" + srv.Addr, "--failure-mode", tt.flag, "--local-fallback-divisor", "4"}})
			clk := storetest.NewClock(time.Now())
			e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", clk)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
				t.Fatalf("with Redis up: %s, %v; want a token bucket", describe(got), err)
			}

			srv.Kill()
			spend(t, e, alice)
			if err := e.Report(); err != nil {
				t.Fatalf("report after Redis died: %v; want the stream to survive", err)
			}
			got := e.Strategy(alice)
			ok := describe(got) == tt.want
			if tt.domain == "local" {
				ok = tokens(got) >= 1 && tokens(got) <= 250
			}
			if !ok {
				t.Fatalf("with Redis down: %s; want %s", describe(got), tt.want)
			}
			if tt.domain == "local" {
				if n := metricValue(t, s, granted+`"local"}`); n < float64(tokens(got)) {
					t.Errorf("with Redis down: %g hits granted from the local store; want the %d assigned", n, tokens(got))
				}
			} else {
				// docs/rlqs.md: blanket answers carry a 10 s time to live.
				clk.Advance(9 * time.Second)
				if got := e.Strategy(alice); describe(got) != tt.want {
					t.Errorf("9 s after the report: %s in force; want %s, for 10 s", describe(got), tt.want)
				}
				clk.Advance(time.Second)
				if got := e.Strategy(alice); got != nil {
					t.Errorf("10 s after the report: %s still in force; want a time to live of at most 10 s", describe(got))
				}
				if err := e.Report(); err != nil {
					t.Fatalf("second report with Redis down: %v", err)
				}
				if got := e.Strategy(alice); describe(got) != tt.want {
					t.Errorf("second report with Redis down: %s; want %s again", describe(got), tt.want)
				}
			}

			shared := metricValue(t, s, granted+`"shared"}`)
			srv.Restart(t)
			deadline := time.Now().Add(15 * time.Second)
			for tokens(e.Strategy(alice)) == 0 || metricValue(t, s, granted+`"shared"}`) <= shared {
				if time.Now().After(deadline) {
					t.Fatalf("15 s after Redis came back: %s, and no hits granted from Redis; want a grant", describe(e.Strategy(alice)))
				}
				time.Sleep(50 * time.Millisecond)
				if tokens(e.Strategy(alice)) > 0 {
					spend(t, e, alice)
				}
				if err := e.Report(); err != nil {
					t.Fatalf("report after Redis came back: %v", err)
				}
			}
		})
	}
}

// TestRLQSRulesReload rewrites the rule file under a live stream: the
// stream survives each reload, and at its next report the bucket is
// matched again, so a lowered limit is assigned a token bucket sized
// from the new limit although the old grant was unspent, and a removed
// rule is assigned ALLOW_ALL.
func TestRLQSRulesReload(t *testing.T) {
	srv := redistest.StartServer(t)
	const rules = "domain: edge\ndescriptors:\n  - key: %s\n    rate_limit: {unit: day, requests_per_unit: %d}\n"
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rules, "user", 1000), args: []string{"--redis-url", "redis://" + srv.Addr, "--reload-debounce", "10ms"}})
	dir := s.dir
	const reloads = `ratelimit_sidecar_config_reloads_total{result="success"}`
	reload := func(t *testing.T, data string) {
		t.Helper()
		before := metricValue(t, s, reloads)
		write(t, filepath.Join(dir, "rules.yaml"), data)
		waitFor(t, func() bool { return metricValue(t, s, reloads) > before })
	}
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 a day leases a tenth, 100; a first grant takes a quarter: 25.
	if got, err := subscribe(e, alice); err != nil || tokens(got) != 25 {
		t.Fatalf("subscription under 1000 a day: %s, %v; want a token bucket of 25 tokens", describe(got), err)
	}
	// Without a reload, the unspent grant stands: no new assignment.
	_, _, assigned := e.Counts()
	if err := e.Report(); err != nil {
		t.Fatal(err)
	}
	if _, _, n := e.Counts(); n != assigned {
		t.Fatalf("report without a reload: %d new assignments; want the grant to stand", n-assigned)
	}

	reload(t, fmt.Sprintf(rules, "user", 40)) // leases a tenth: 4
	if err := e.Report(); err != nil {
		t.Fatalf("report after the limit was lowered: %v; want the stream to survive", err)
	}
	if got := e.Strategy(alice); tokens(got) < 1 || tokens(got) > 4 {
		t.Errorf("after the limit was lowered to 40 a day: %s; want a token bucket of 1 to 4 tokens", describe(got))
	}

	reload(t, fmt.Sprintf(rules, "path", 40)) // no rule for user any more
	// A bucket no rule serves is answered only while it has requests:
	// at a report without any it is abandoned.
	if _, err := e.Request(alice); err != nil {
		t.Fatal(err)
	}
	if err := e.Report(); err != nil {
		t.Fatalf("report after the rule was removed: %v; want the stream to survive", err)
	}
	if got := e.Strategy(alice); describe(got) != "ALLOW_ALL" {
		t.Errorf("after the rule was removed: %s; want ALLOW_ALL", describe(got))
	}

	reload(t, fmt.Sprintf(rules, "user", 1000))
	if _, err := e.Request(alice); err != nil {
		t.Fatal(err)
	}
	if err := e.Report(); err != nil {
		t.Fatalf("report after the rule came back: %v", err)
	}
	if got := e.Strategy(alice); tokens(got) < 1 {
		t.Errorf("after the rule came back: %s; want a token bucket", describe(got))
	}
}

// TestRLQSBuckets: what a bucket id maps to, through the sidecar's flags.
// A bucket no rule matches, or of a domain without rules, is assigned
// ALLOW_ALL (as RLS answers OK), for 10 s. A bucket id past the RLS
// path's request bounds (--max-value-bytes, --max-entries) or empty, and
// a bucket past the 10,000 a stream holds, is refused alone: answered by
// its domain's failure mode (closed: DENY_ALL, open: ALLOW_ALL), again at
// every report with requests in it and abandoned at one without, while
// the stream serves its other buckets; the stream's
// first refusal is logged at Warn with the reason, and each is counted. A
// stream without a domain ends with InvalidArgument.
func TestRLQSBuckets(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf(rlqsRules, ""))
	write(t, filepath.Join(dir, "open.yaml"), "domain: opened\nfailure_mode: open\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n")
	logs := &logtest.Buffer{}
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr,
		"--failure-mode", "closed", "--max-value-bytes", "16", "--max-entries", "2"}})
	conn := grpcConn(t, s.grpcAddr, nil)

	assigned := []struct {
		name   string
		domain string
		id     map[string]string
		want   string
	}{
		{"a rule's bucket", "edge", alice, "token_bucket of 2 tokens"},
		{"no rule", "edge", map[string]string{"path": "/a"}, "ALLOW_ALL"},
		{"a domain without rules", "nowhere", alice, "ALLOW_ALL"},
		{"sorted by key, a comes before the rule's key", "edge", map[string]string{"user": "bob", "a": "b"}, "ALLOW_ALL"},
	}
	for _, tt := range assigned {
		t.Run(tt.name, func(t *testing.T) {
			clk := storetest.NewClock(time.Now())
			e, err := rlqsEnvoy(t, conn, tt.domain, clk)
			if err != nil {
				t.Fatal(err)
			}
			got, err := subscribe(e, tt.id)
			if err != nil || describe(got) != tt.want {
				t.Fatalf("bucket %v of domain %s: %s, %v; want %s", tt.id, tt.domain, describe(got), err, tt.want)
			}
			if tt.want != "ALLOW_ALL" {
				return
			}
			clk.Advance(10 * time.Second)
			if got := e.Strategy(tt.id); got != nil {
				t.Errorf("10 s later: %s still in force; want a time to live of at most 10 s", describe(got))
			}
		})
	}

	refused := []struct {
		name   string
		domain string
		id     map[string]string
		want   string // the assignment
		reason string // in the log
	}{
		{"a value over --max-value-bytes", "edge", map[string]string{"user": strings.Repeat("x", 17)}, "DENY_ALL",
			"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries[0].value: longer than 16 bytes"},
		{"a key over --max-value-bytes", "edge", map[string]string{strings.Repeat("k", 17): "v"}, "DENY_ALL",
			"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries[0].key: longer than 16 bytes"},
		{"more entries than --max-entries", "edge", map[string]string{"a": "1", "b": "2", "user": "alice"}, "DENY_ALL",
			"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries: 3 entries, more than the maximum 2"},
		{"an empty bucket id", "edge", map[string]string{}, "DENY_ALL", "bucket_quota_usages[0].bucket_id.bucket: must not be empty"},
		{"an empty key", "edge", map[string]string{"": "v"}, "DENY_ALL", "bucket_quota_usages[0].bucket_id.bucket: empty key"},
		{"a domain that fails open", "opened", map[string]string{"user": strings.Repeat("y", 17)}, "ALLOW_ALL",
			"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries[0].value: longer than 16 bytes"},
	}
	const series = `ratelimit_sidecar_rlqs_assignments_total{action="%s",domain="%s",reason="refused"}`
	for i, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			counted := metricValue(t, s, fmt.Sprintf(series, strings.ToLower(tt.want), tt.domain))
			e, err := rlqsEnvoy(t, conn, tt.domain, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := subscribe(e, tt.id)
			if err != nil || describe(got) != tt.want {
				t.Fatalf("bucket %q of domain %q: %s, %v; want %s", tt.id, tt.domain, describe(got), err, tt.want)
			}
			if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
				t.Fatalf("a good bucket on the stream after the refusal: %s, %v; want a token bucket", describe(got), err)
			}
			if _, err := e.Request(tt.id); err != nil {
				t.Fatal(err)
			}
			if err := e.Report(); err != nil {
				t.Fatalf("report of both buckets: %v; want the stream to go on", err)
			}
			if got := e.Strategy(tt.id); describe(got) != tt.want {
				t.Errorf("refused bucket at the next report with a request: %s; want %s again", describe(got), tt.want)
			}
			if got := e.Strategy(alice); tokens(got) == 0 {
				t.Errorf("good bucket at the next report: %s; want its token bucket", describe(got))
			}
			if n := metricValue(t, s, fmt.Sprintf(series, strings.ToLower(tt.want), tt.domain)) - max(counted, 0); n != 2 {
				t.Errorf("%g refusals counted; want 2 (the subscription and the report)", n)
			}
			if len(tt.id) > 0 {
				// Envoy drops the bucket at a report without requests in it.
				if err := e.Report(); err != nil {
					t.Fatal(err)
				}
				if n := e.Buckets(); n != 1 {
					t.Errorf("after a report without requests in the refused bucket, the Envoy holds %d buckets; want 1, the good one", n)
				}
			}
			var lines int
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "rlqs bucket refused") && strings.Contains(l, fmt.Sprintf("%q", tt.reason)) {
					lines++
				}
			}
			want := 0 // one per stream: this one's, and those of earlier cases with the same reason
			for _, c := range refused[:i+1] {
				if c.reason == tt.reason {
					want++
				}
			}
			if lines != want {
				t.Errorf("%d Warn lines refusing with %q; want %d, one per stream", lines, tt.reason, want)
			}
		})
	}

	t.Run("no domain", func(t *testing.T) {
		e, err := rlqsEnvoy(t, conn, "", nil)
		if err == nil {
			_, err = subscribe(e, alice)
		}
		if err == nil {
			err = e.Err() // refused before the subscription went out
		}
		if want := "domain: must be set in the first message"; status.Code(err) != codes.InvalidArgument || !strings.HasSuffix(err.Error(), "desc = "+want) {
			t.Errorf("a stream without a domain: %v; want InvalidArgument %q", err, want)
		}
	})

	// A stream holds at most --rlqs-max-buckets (10,000) buckets, but a
	// bucket no rule serves is not held, so it takes no room: one report
	// of 10,001 of them is answered ALLOW_ALL for each. (pkg/rlqs's
	// TestStreamBounds refuses buckets past the bound.)
	t.Run("bucket 10,001", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge"}
		for i := range 10_001 {
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"path": strconv.Itoa(i)}}, NumRequestsDenied: 1,
			})
		}
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("10,001 buckets on one stream: %v; want an answer", err)
		}
		got := map[string]int{}
		for _, a := range resp.GetBucketAction() {
			s := describe(a.GetQuotaAssignmentAction().GetRateLimitStrategy())
			if a.GetBucketId().GetBucket()["path"] == "10000" {
				s = "last: " + s
			}
			got[s]++
		}
		if want := map[string]int{"ALLOW_ALL": 10_000, "last: ALLOW_ALL": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("answers to 10,001 buckets without a rule: %v; want %v", got, want)
		}
		_ = stream.CloseSend()
	})
}

// TestRLQSStreamsAreStreams: the sidecar bounds a unary call by
// --grpc-request-timeout and a streaming call only until its first
// message. An RLQS stream is one of the streaming calls, so it outlives
// the timeout: Envoy keeps one stream open for as long as it runs.
func TestRLQSStreamsAreStreams(t *testing.T) {
	srv := redistest.StartServer(t)
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr, "--grpc-request-timeout", "100ms"}})
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
		t.Fatalf("subscription: %s, %v; want a token bucket", describe(got), err)
	}
	time.Sleep(300 * time.Millisecond) // three request timeouts
	if err := e.Report(); err != nil {
		t.Errorf("report 300 ms after the subscription, with --grpc-request-timeout 100ms: %v; want the stream open", err)
	}
}

// TestRLQSShutdown stops a sidecar while an Envoy's stream is open: the
// stream is one of the streaming calls shutdown ends, so it does not hold
// the graceful stop until --shutdown-timeout, and Envoy sees it end.
func TestRLQSShutdown(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf(rlqsRules, ""))
	logs := &logtest.Buffer{}
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--drain-delay", "0s", "--shutdown-timeout", "3s", "--grpc-request-timeout", "1m"}})
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
		t.Fatalf("subscription: %s, %v; want a token bucket", describe(got), err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); strings.Contains(l, "in-flight requests did not finish in time") {
		t.Errorf("the open RLQS stream held the graceful stop until --shutdown-timeout:\n%s", l)
	}
	if err := e.Report(); err == nil {
		t.Error("a report after the sidecar stopped was answered; want the stream ended")
	}
}

// TestRLQSHealth: the gRPC health service answers for RLQS's service name
// when RLQS is served (Redis), and knows no such service when it is not
// (the memory store), as for any service the server does not have.
func TestRLQSHealth(t *testing.T) {
	check := func(t *testing.T, s *sidecar) (healthpb.HealthCheckResponse_ServingStatus, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(grpcConn(t, s.grpcAddr, nil)).Check(ctx, &healthpb.HealthCheckRequest{Service: rlqs.ServiceName})
		return resp.GetStatus(), err
	}
	srv := redistest.StartServer(t)
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr}})
	if got, err := check(t, s); err != nil || got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of %s with Redis: %v, %v; want SERVING", rlqs.ServiceName, got, err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf(rlqsRules, ""))
	mem := startSidecar(t, sidecarOpts{args: []string{"--config", dir}})
	if _, err := check(t, mem); status.Code(err) != codes.NotFound {
		t.Errorf("health of %s on the memory store: %v; want NotFound", rlqs.ServiceName, err)
	}
}

// TestRLQSTracing: with --tracing, each RLQS message the sidecar handles
// sends a span, "rlqs report" for a report, with the domain, the buckets
// reported and the actions sent, and the Redis round trip of its grant
// as a child span.
func TestRLQSTracing(t *testing.T) {
	srv := redistest.StartServer(t)
	r := otlptest.StartGRPC(t)
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr, "--tracing", "--tracing-protocol", "grpc",
		"--tracing-endpoint", r.URL, "--tracing-sampling-rate", "1"}})
	e, err := rlqsEnvoy(t, grpcConn(t, s.grpcAddr, nil), "edge", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := subscribe(e, alice); err != nil || tokens(got) == 0 {
		t.Fatalf("subscription: %s, %v; want a token bucket", describe(got), err)
	}
	e.Close()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	spans := r.WaitSpans(2, exportWait)
	reports := byName(spans, "rlqs report")
	if len(reports) != 1 {
		t.Fatalf("received %d spans, %d named rlqs report; want one", len(spans), len(reports))
	}
	sp := reports[0]
	for k, v := range map[string]any{"ratelimit.domain": "edge", "rlqs.buckets": int64(1), "rlqs.actions": int64(1)} {
		if got := sp.Attrs()[k]; got != v {
			t.Errorf("rlqs report span: %s = %v, want %v", k, got, v)
		}
	}
	if !slices.ContainsFunc(byName(spans, redisSpanName), func(c otlptest.Span) bool { return c.ParentID() == sp.SpanID() }) {
		t.Errorf("no %s span is the child of the rlqs report span (spans: %d)", redisSpanName, len(spans))
	}
}
