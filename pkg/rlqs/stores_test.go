package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// The tests of this file serve RLQS as the sidecar does, on a gRPC
// server on loopback, over the stores it takes quota from: Redis (a
// redis-server of internal/redistest) and the memory store, with
// internal/rlqstest playing Envoy's rate_limit_quota filter. Windows are
// a day long, so that no grant is taken near its window's end.

// dayRules is domain edge with a bucket {user: <any>} served as a fixed
// window of 1000 a day, leased 8 hits at most, so that every grant is
// small. %s goes before descriptors (a failure_mode line, or nothing).
const dayRules = "domain: edge\n%sdescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n"

var alice = map[string]string{"user": "alice"}

// served is an RLQS server registered on a gRPC server on loopback.
type served struct {
	addr   string
	clk    *storetest.Clock
	engine *limits.Engine
	m      *rlqstest.Metrics
	logs   *observer.ObservedLogs // Info and above
}

// serveOn serves RLQS for the rules rs on st, deciding by clk, with the
// engine options eo and the options o.
func serveOn(t *testing.T, st limits.Store, clk *storetest.Clock, rs *limits.Ruleset, eo limits.EngineOptions, o rlqs.Options) *served {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	s := &served{clk: clk, m: &rlqstest.Metrics{}, logs: logs, engine: limits.NewEngine(rs, st, eo)}
	o.Now, o.Metrics, o.AfterFunc = clk.Now, s.m, clk.AfterFunc
	s.addr = rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, s.engine, st, log, o) })
	return s
}

// parseRules parses rule files, each of the texts given.
func parseRules(t *testing.T, texts ...string) *limits.Ruleset {
	t.Helper()
	var files []config.File
	for i, text := range texts {
		files = append(files, config.File{Name: fmt.Sprintf("rules%d.yaml", i), Data: []byte(text)})
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// openRedis opens a store on srv deciding by clk, with a key prefix of
// the test's own.
func openRedis(t *testing.T, srv *redistest.Server, clk *storetest.Clock, o redis.Options) *redis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.URL, o.KeyPrefix, o.Timeout, o.Now = "redis://"+srv.Addr, "rlqs:"+t.Name()+":", 5*time.Second, clk.Now
	st, err := redis.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// onStores runs f on Redis and on the memory store, each a subtest.
func onStores(t *testing.T, f func(t *testing.T, st limits.Store, clk *storetest.Clock)) {
	srv := redistest.StartServer(t)
	t.Run("redis", func(t *testing.T) {
		clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
		f(t, openRedis(t, srv, clk, redis.Options{}), clk)
	})
	t.Run("memory", func(t *testing.T) {
		clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
		f(t, memory.New(memory.Options{Now: clk.Now}), clk)
	})
}

// subscribe sends the bucket's first request, which subscribes it, and
// returns the strategy assigned in answer.
func subscribe(t *testing.T, e *rlqstest.Envoy, id map[string]string) *typev3.RateLimitStrategy {
	t.Helper()
	mustRequest(t, e, id)
	return e.Strategy(id)
}

// spendAll makes requests into bucket id until one is denied (at most
// 10,000, which no grant of these tests reaches).
func spendAll(t *testing.T, e *rlqstest.Envoy, id map[string]string) {
	t.Helper()
	for i := 0; mustRequest(t, e, id); i++ {
		if i == 10_000 {
			t.Fatalf("bucket %v: 10,000 requests allowed in a row; want its grant spent", id)
		}
	}
}

// tokens is the size of s's token bucket, 0 if s is not one.
func tokens(s *typev3.RateLimitStrategy) uint32 {
	return s.GetTokenBucket().GetMaxTokens()
}

// TestRedisDown kills Redis while an Envoy holds a grant. The grant
// stands until it is spent; the next report needs the store, and the
// domain's failure mode (from its rule file, else the engine's) decides
// the assignment: open allows all and every other mode denies all
// (docs/rlqs.md), each for at most 10 s and sent again at every report,
// on the same stream. Once Redis is back, the bucket gets quota again.
// (TestStoreDown has failure mode local.)
func TestRedisDown(t *testing.T) {
	tests := []struct {
		name   string
		domain string // the rule file's failure_mode, or empty
		engine limits.FailureMode
		want   string // rlqstest.Describe() of the assignment while Redis is down
	}{
		{name: "domain open", domain: "open", engine: limits.FailClosed, want: "ALLOW_ALL"},
		{name: "engine open", engine: limits.FailOpen, want: "ALLOW_ALL"},
		{name: "domain closed", domain: "closed", engine: limits.FailOpen, want: "DENY_ALL"},
		{name: "domain error", domain: "error", engine: limits.FailOpen, want: "DENY_ALL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			mode := ""
			if tt.domain != "" {
				mode = "failure_mode: " + tt.domain + "\n"
			}
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := serveOn(t, openRedis(t, srv, clk, redis.Options{}), clk, parseRules(t, fmt.Sprintf(dayRules, mode)),
				limits.EngineOptions{FailureMode: tt.engine}, rlqs.Options{})
			e := dialEnvoy(t, s.addr, "edge", clk.Now)
			if got := subscribe(t, e, alice); tokens(got) == 0 {
				t.Fatalf("with Redis up: %s; want a token bucket", rlqstest.Describe(got))
			}

			srv.Kill()
			spendAll(t, e, alice)
			if err := e.Report(); err != nil {
				t.Fatalf("report after Redis died: %v; want the stream to survive", err)
			}
			if got := e.Strategy(alice); rlqstest.Describe(got) != tt.want {
				t.Fatalf("with Redis down: %s; want %s", rlqstest.Describe(got), tt.want)
			}
			clk.Advance(9 * time.Second)
			if got := e.Strategy(alice); rlqstest.Describe(got) != tt.want {
				t.Errorf("9 s after the report: %s in force; want %s, for 10 s", rlqstest.Describe(got), tt.want)
			}
			clk.Advance(time.Second)
			if got := e.Strategy(alice); got != nil {
				t.Errorf("10 s after the report: %s still in force; want a time to live of at most 10 s", rlqstest.Describe(got))
			}
			mustReport(t, e)
			if got := e.Strategy(alice); rlqstest.Describe(got) != tt.want {
				t.Errorf("second report with Redis down: %s; want %s again", rlqstest.Describe(got), tt.want)
			}

			granted := s.m.Count("token_bucket/grant")
			srv.Restart(t)
			// go-redis may fail a call or two on connections Redis closed.
			for i := 0; tokens(e.Strategy(alice)) == 0 || s.m.Count("token_bucket/grant") == granted; i++ {
				if i == 20 {
					t.Fatalf("20 reports after Redis came back: %s; want a grant", rlqstest.Describe(e.Strategy(alice)))
				}
				if tokens(e.Strategy(alice)) > 0 {
					spendAll(t, e, alice)
				}
				mustReport(t, e)
			}
		})
	}
}

// TestRulesReload changes the rules under a live stream: the stream
// survives each change, and at its next report the bucket is matched
// again, so a lowered limit is assigned a token bucket sized from the new
// limit although the old grant was unspent, and a removed rule is
// assigned ALLOW_ALL.
func TestRulesReload(t *testing.T) {
	const rules = "domain: edge\ndescriptors:\n  - key: %s\n    rate_limit: {unit: day, requests_per_unit: %d}\n"
	onStores(t, func(t *testing.T, st limits.Store, clk *storetest.Clock) {
		s := serveOn(t, st, clk, parseRules(t, fmt.Sprintf(rules, "user", 1000)), limits.EngineOptions{}, rlqs.Options{})
		e := dialEnvoy(t, s.addr, "edge", clk.Now)
		// 1000 a day leases a tenth, 100; a first grant takes a quarter: 25.
		if got := subscribe(t, e, alice); tokens(got) != 25 {
			t.Fatalf("subscription under 1000 a day: %s; want a token bucket of 25 tokens", rlqstest.Describe(got))
		}
		// Without a change, the unspent grant stands: no new assignment.
		_, _, assigned := e.Counts()
		mustReport(t, e)
		if _, _, n := e.Counts(); n != assigned {
			t.Fatalf("report without a change: %d new assignments; want the grant to stand", n-assigned)
		}

		s.engine.SetRules(parseRules(t, fmt.Sprintf(rules, "user", 40))) // leases a tenth: 4
		mustReport(t, e)
		if got := e.Strategy(alice); tokens(got) < 1 || tokens(got) > 4 {
			t.Errorf("after the limit was lowered to 40 a day: %s; want a token bucket of 1 to 4 tokens", rlqstest.Describe(got))
		}

		s.engine.SetRules(parseRules(t, fmt.Sprintf(rules, "path", 40))) // no rule for user any more
		// A bucket no rule serves is answered only while it has requests:
		// at a report without any it is abandoned.
		mustRequest(t, e, alice)
		mustReport(t, e)
		if got := e.Strategy(alice); rlqstest.Describe(got) != "ALLOW_ALL" {
			t.Errorf("after the rule was removed: %s; want ALLOW_ALL", rlqstest.Describe(got))
		}

		s.engine.SetRules(parseRules(t, fmt.Sprintf(rules, "user", 1000)))
		mustRequest(t, e, alice)
		mustReport(t, e)
		if got := e.Strategy(alice); tokens(got) < 1 {
			t.Errorf("after the rule came back: %s; want a token bucket", rlqstest.Describe(got))
		}
	})
}

// TestBucketIDs: what a bucket id maps to. A bucket no rule matches, or
// of a domain without rules, is assigned ALLOW_ALL (as RLS answers OK),
// for 10 s; a bucket id's entries sorted by key form the descriptor.
func TestBucketIDs(t *testing.T) {
	const nested = "domain: nested\ndescriptors:\n  - key: a\n    descriptors:\n      - key: user\n        rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n"
	onStores(t, func(t *testing.T, st limits.Store, clk *storetest.Clock) {
		s := serveOn(t, st, clk, parseRules(t, fmt.Sprintf(dayRules, ""), nested), limits.EngineOptions{}, rlqs.Options{})
		tests := []struct {
			name   string
			domain string
			id     map[string]string
			want   string
		}{
			// A first grant takes a quarter of the lease of 8.
			{"a rule's bucket", "edge", alice, "token_bucket of 2 tokens"},
			{"no rule", "edge", map[string]string{"path": "/a"}, "ALLOW_ALL"},
			{"a domain without rules", "nowhere", alice, "ALLOW_ALL"},
			{"sorted by key: a, then user", "nested", map[string]string{"user": "bob", "a": "b"}, "token_bucket of 2 tokens"},
			{"sorted by key, a comes before the rule's key", "edge", map[string]string{"user": "bob", "a": "b"}, "ALLOW_ALL"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				e := dialEnvoy(t, s.addr, tt.domain, clk.Now)
				if got := subscribe(t, e, tt.id); rlqstest.Describe(got) != tt.want {
					t.Fatalf("bucket %v of domain %s: %s; want %s", tt.id, tt.domain, rlqstest.Describe(got), tt.want)
				}
				if tt.want != "ALLOW_ALL" {
					return
				}
				clk.Advance(10 * time.Second)
				if got := e.Strategy(tt.id); got != nil {
					t.Errorf("10 s later: %s still in force; want a time to live of at most 10 s", rlqstest.Describe(got))
				}
			})
		}
	})
}

// TestBucketsRefused: a bucket id past the RLS path's request bounds, or
// with an empty key, is refused alone: answered by its domain's failure
// mode (closed: DENY_ALL, open: ALLOW_ALL), again at every report with
// requests in it and abandoned at one without, while the stream serves
// its other buckets. Each refusal is counted, and the stream's first is
// logged at Warn with the reason, the later ones not. (TestStreamBounds
// has the other bounds.)
func TestBucketsRefused(t *testing.T) {
	const opened = "domain: opened\nfailure_mode: open\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1000, lease: 8}\n"
	onStores(t, func(t *testing.T, st limits.Store, clk *storetest.Clock) {
		s := serveOn(t, st, clk, parseRules(t, fmt.Sprintf(dayRules, ""), opened), limits.EngineOptions{FailureMode: limits.FailClosed,
			Limits: limits.RequestLimits{MaxEntries: 2, MaxValueBytes: 16}}, rlqs.Options{})
		tests := []struct {
			name   string
			domain string
			id     map[string]string
			want   string // the assignment
			reason string // in the log
		}{
			{"a key over the bytes of a value", "edge", map[string]string{strings.Repeat("k", 17): "v"}, "DENY_ALL",
				"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries[0].key: longer than 16 bytes"},
			{"an empty key", "edge", map[string]string{"": "v"}, "DENY_ALL", "bucket_quota_usages[0].bucket_id.bucket: empty key"},
			{"a domain that fails open", "opened", map[string]string{"user": strings.Repeat("y", 17)}, "ALLOW_ALL",
				"bucket_quota_usages[0].bucket_id, matched as a descriptor: descriptors[0].entries[0].value: longer than 16 bytes"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				counted := s.m.Count(strings.ToLower(tt.want) + "/refused")
				e := dialEnvoy(t, s.addr, tt.domain, clk.Now)
				if got := subscribe(t, e, tt.id); rlqstest.Describe(got) != tt.want {
					t.Fatalf("bucket %q of domain %q: %s; want %s", tt.id, tt.domain, rlqstest.Describe(got), tt.want)
				}
				if got := subscribe(t, e, alice); tokens(got) == 0 {
					t.Fatalf("a good bucket on the stream after the refusal: %s; want a token bucket", rlqstest.Describe(got))
				}
				mustRequest(t, e, tt.id)
				mustReport(t, e)
				if got := e.Strategy(tt.id); rlqstest.Describe(got) != tt.want {
					t.Errorf("refused bucket at the next report with a request: %s; want %s again", rlqstest.Describe(got), tt.want)
				}
				if got := e.Strategy(alice); tokens(got) == 0 {
					t.Errorf("good bucket at the next report: %s; want its token bucket", rlqstest.Describe(got))
				}
				if n := s.m.Count(strings.ToLower(tt.want)+"/refused") - counted; n != 2 {
					t.Errorf("%d refusals counted; want 2 (the subscription and the report)", n)
				}
				// Envoy drops the bucket at a report without requests in it.
				mustReport(t, e)
				if n := e.Buckets(); n != 1 {
					t.Errorf("after a report without requests in the refused bucket, the Envoy holds %d buckets; want 1, the good one", n)
				}
				warned := s.logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("rlqs bucket refused").
					Filter(func(e observer.LoggedEntry) bool { return e.ContextMap()["error"] == tt.reason }).Len()
				if warned != 1 {
					t.Errorf("%d Warn lines refusing with %q; want 1, for the stream's first refusal", warned, tt.reason)
				}
			})
		}
	})
}

// TestUnkeptBucketsTakeNoRoom: a stream holds at most MaxBuckets
// buckets, but a bucket no rule serves is not held, so it takes no
// room: one report of more of them than MaxBuckets is answered ALLOW_ALL
// for each. (TestStreamBounds refuses buckets past the bound.)
func TestUnkeptBucketsTakeNoRoom(t *testing.T) {
	const most = 100
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	s := serveOn(t, memory.New(memory.Options{Now: clk.Now}), clk, parseRules(t, fmt.Sprintf(dayRules, "")), limits.EngineOptions{}, rlqs.Options{MaxBuckets: most})
	stream := rawStream(t, s.addr)
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge"}
	for i := range most + 1 {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"path": strconv.Itoa(i)}}, NumRequestsDenied: 1,
		})
	}
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("%d buckets on one stream: %v; want an answer", most+1, err)
	}
	got := map[string]int{}
	for _, a := range resp.GetBucketAction() {
		s := rlqstest.Describe(a.GetQuotaAssignmentAction().GetRateLimitStrategy())
		if a.GetBucketId().GetBucket()["path"] == strconv.Itoa(most) {
			s = "last: " + s
		}
		got[s]++
	}
	if want := map[string]int{"ALLOW_ALL": most, "last: ALLOW_ALL": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers to %d buckets without a rule: %v; want %v", most+1, got, want)
	}
}

// TestTracing: with a Tracer, each report is a span, "rlqs report",
// with the domain, the buckets reported and the actions sent, and the
// store's calls get its context: Redis's round trip for the grant is a
// child span.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	st := openRedis(t, redistest.StartServer(t), clk, redis.Options{})
	s := serveOn(t, st, clk, parseRules(t, fmt.Sprintf(dayRules, "")), limits.EngineOptions{}, rlqs.Options{Tracer: tp.Tracer("test")})

	stream := rawStream(t, s.addr)
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqspb.BucketId{Bucket: alice}, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	// A fresh token bucket may come after a DENY_ALL of 1 s, which
	// empties the one Envoy holds (push.go): the last action is the grant.
	resp, err := stream.Recv()
	if a := resp.GetBucketAction(); err != nil || len(a) == 0 || tokens(a[len(a)-1].GetQuotaAssignmentAction().GetRateLimitStrategy()) == 0 {
		t.Fatalf("subscription: %v, %v; want a token bucket", resp, err)
	}
	// The handler has returned, and the report's span ended, once the
	// stream ends.
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}

	var reports, redisChildren []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == "rlqs report" {
			reports = append(reports, sp)
		}
	}
	if len(reports) != 1 {
		t.Fatalf("%d spans named rlqs report of %d; want one", len(reports), len(rec.Ended()))
	}
	sp := reports[0]
	attrs := map[string]any{}
	for _, kv := range sp.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	for k, v := range map[string]any{"ratelimit.domain": "edge", "rlqs.buckets": int64(1), "rlqs.actions": int64(1)} {
		if got := attrs[k]; got != v {
			t.Errorf("rlqs report span: %s = %v, want %v", k, got, v)
		}
	}
	for _, c := range rec.Ended() {
		if c.Name() == "redis EVALSHA" && c.Parent().SpanID() == sp.SpanContext().SpanID() {
			redisChildren = append(redisChildren, c)
		}
	}
	if len(redisChildren) == 0 {
		t.Errorf("no redis EVALSHA span is the child of the rlqs report span (spans: %d)", len(rec.Ended()))
	}
}
