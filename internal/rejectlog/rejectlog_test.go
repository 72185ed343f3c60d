package rejectlog_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

const rejectionRules = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
`

// rig is an engine on the sidecar's store chain (leases, deny
// cache, memory backend) and a rejection log, on one fake clock.
type rig struct {
	clk    *storetest.Clock
	engine *limits.Engine
	rej    *rejectlog.Log
	log    *logtest.Buffer
}

func newRig(t testing.TB, level zapcore.Level, o rejectlog.Options, backend limits.Store, eo limits.EngineOptions) *rig {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rejectionRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	if backend == nil {
		backend = memory.New(memory.Options{Now: clk.Now})
	}
	deny := store.NewDenyCache(backend, store.DenyCacheOptions{Now: clk.Now})
	chain := store.NewLeases(deny, store.LeasesOptions{Now: clk.Now})
	log, buf := logtest.JSON(level)
	return &rig{
		clk:    clk,
		engine: limits.NewEngine(rs, chain, eo),
		rej:    rejectlog.New(log, rejectlog.Options{Level: o.Level, Rate: o.Rate, Values: o.Values, Store: "memory", Now: clk.Now}),
		log:    buf,
	}
}

// decide decides req and tells the log if it was rejected, as the RLS
// server does.
func (r *rig) decide(t testing.TB, req *limits.Request) limits.Code {
	t.Helper()
	var d limits.Decision
	if err := r.engine.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if d.Code == limits.OverLimit {
		r.rej.Rejected(req, &d)
	}
	return d.Code
}

func aliceRequest() *limits.Request {
	return &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{
		{Entries: []limits.Entry{{Key: "tenant", Value: "acme"}}},
		{Entries: []limits.Entry{{Key: "user", Value: "alice"}}},
	}}
}

// aliceKey is the counter key of alice's per-user limit.
func aliceKey(t testing.TB, r *rig) string {
	t.Helper()
	x := r.engine.Rules().Explain("edge", []limits.Entry{{Key: "user", Value: "alice"}})
	if len(x.Limits) != 1 {
		t.Fatalf("alice's limits: %+v", x.Limits)
	}
	return x.Limits[0].Key
}

// TestRejectionLogLine: one line per rejected request, with what an
// operator needs to know why, and who decided: the backend, then the
// deny cache.
func TestRejectionLogLine(t *testing.T) {
	r := newRig(t, zapcore.InfoLevel, rejectlog.Options{Level: zapcore.InfoLevel, Rate: 10, Values: rejectlog.Plain}, nil, limits.EngineOptions{})
	req := aliceRequest()
	for i, want := range []limits.Code{limits.OK, limits.OverLimit, limits.OverLimit} {
		if got := r.decide(t, req); got != want {
			t.Fatalf("request %d: %v, want %v", i, got, want)
		}
	}
	lines := r.log.Lines(t, rejectlog.Message)
	if len(lines) != 2 {
		t.Fatalf("%d rejection lines, want 2:\n%s", len(lines), r.log)
	}
	over := func(reset string) []any {
		return []any{map[string]any{
			"descriptor": 1.0,
			"rule":       "user",
			"limit":      `fixed_window 1 per 1m0s, name "per-user"`,
			"key":        aliceKey(t, r),
			"remaining":  0.0,
			"reset":      reset,
		}}
	}
	for i, want := range []map[string]any{{
		"level":       "info",
		"logger":      rejectlog.LoggerName,
		"msg":         rejectlog.Message,
		"domain":      "edge",
		"descriptors": []any{"tenant=acme", "user=alice"},
		"over":        over("59s"),
		"decided_by":  "memory",
		"not_logged":  0.0,
	}, {
		"level":       "info",
		"logger":      rejectlog.LoggerName,
		"msg":         rejectlog.Message,
		"domain":      "edge",
		"descriptors": []any{"tenant=acme", "user=alice"},
		// The cache's entry runs out a tick before the window does.
		"over":       over("58.999999s"),
		"decided_by": store.DecidedByDenyCache,
		"not_logged": 0.0,
	}} {
		if diff := cmp.Diff(want, lines[i]); diff != "" {
			t.Errorf("line %d (-want +got):\n%s", i, diff)
		}
	}
}

// TestRejectionLogHashesValues: by default no descriptor value, and no
// key (which holds them), reaches the log, only their hashes.
func TestRejectionLogHashesValues(t *testing.T) {
	r := newRig(t, zapcore.InfoLevel, rejectlog.Options{Level: zapcore.InfoLevel, Rate: 10, Values: rejectlog.Hashed}, nil, limits.EngineOptions{})
	req := aliceRequest()
	r.decide(t, req)
	r.decide(t, req)
	lines := r.log.Lines(t, rejectlog.Message)
	if len(lines) != 1 {
		t.Fatalf("%d rejection lines, want 1:\n%s", len(lines), r.log)
	}
	if strings.Contains(r.log.String(), "alice") || strings.Contains(r.log.String(), "acme") {
		t.Errorf("the log shows a value:\n%s", r.log)
	}
	want := []any{"tenant=" + rejectlog.Hash("acme"), "user=" + rejectlog.Hash("alice")}
	if diff := cmp.Diff(want, lines[0]["descriptors"]); diff != "" {
		t.Errorf("descriptors (-want +got):\n%s", diff)
	}
	over := lines[0]["over"].([]any)[0].(map[string]any)
	if got, want := over["key"], rejectlog.Hash(aliceKey(t, r)); got != want {
		t.Errorf("key = %v, want %v", got, want)
	}
}

// TestRejectionLogRate: 1000 rejections in an instant log the burst, and
// count the rest; as time passes, the rate's worth more, the first of
// which says how many were left out before it.
func TestRejectionLogRate(t *testing.T) {
	r := newRig(t, zapcore.InfoLevel, rejectlog.Options{Level: zapcore.InfoLevel, Rate: 10, Values: rejectlog.Hashed}, nil, limits.EngineOptions{})
	req := aliceRequest()
	r.decide(t, req)
	// Concurrent rejections share one bucket.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				r.decide(t, req)
			}
		})
	}
	wg.Wait()
	if n := len(r.log.Lines(t, rejectlog.Message)); n != 10 {
		t.Errorf("1000 rejections at once: %d lines, want the burst of 10", n)
	}
	if got := r.rej.Suppressed(); got != 990 {
		t.Errorf("Suppressed = %d, want 990", got)
	}
	// Under concurrency a rejection left out while another writes one of
	// the burst's lines may be counted in that line rather than the next;
	// the burst's lines and what is pending account for every one.
	pending := rejectlog.NotLogged(r.rej)
	inBurst := uint64(0)
	for _, l := range r.log.Lines(t, rejectlog.Message) {
		inBurst += uint64(l["not_logged"].(float64))
	}
	if inBurst+pending != 990 {
		t.Errorf("not_logged of the burst's lines %d, and pending %d: want 990 in all", inBurst, pending)
	}
	r.clk.Advance(500 * time.Millisecond) // 5 lines' worth
	for range 1000 {
		r.decide(t, req)
	}
	lines := r.log.Lines(t, rejectlog.Message)
	if len(lines) != 15 {
		t.Fatalf("after 500 ms more: %d lines, want 15", len(lines))
	}
	if got := uint64(lines[10]["not_logged"].(float64)); got != pending {
		t.Errorf("the first line after the flood: not_logged = %d, want the %d still pending", got, pending)
	}
	if got := lines[11]["not_logged"]; got != 0.0 {
		t.Errorf("the next line: not_logged = %v, want 0", got)
	}
	if got := r.rej.Suppressed(); got != 990+995 {
		t.Errorf("Suppressed = %d, want %d", got, 990+995)
	}
	sum := rejectlog.NotLogged(r.rej)
	for _, l := range lines {
		sum += uint64(l["not_logged"].(float64))
	}
	if sum != r.rej.Suppressed() {
		t.Errorf("not_logged of every line, and pending, sum to %d; want Suppressed, %d", sum, r.rej.Suppressed())
	}
}

// TestRejectionLogLevel: at debug, the lines show only in a debug log; in
// any other, a rejection costs a level check and counts nothing.
func TestRejectionLogLevel(t *testing.T) {
	for _, tt := range []struct {
		name           string
		logLevel       zapcore.Level
		wantLines      int
		wantSuppressed uint64
	}{
		{"info_log", zapcore.InfoLevel, 0, 0},
		{"debug_log", zapcore.DebugLevel, 10, 90},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.logLevel, rejectlog.Options{Level: zapcore.DebugLevel, Rate: 10, Values: rejectlog.Hashed}, nil, limits.EngineOptions{})
			req := aliceRequest()
			for range 101 {
				r.decide(t, req)
			}
			lines := r.log.Lines(t, rejectlog.Message)
			if len(lines) != tt.wantLines {
				t.Fatalf("%d lines, want %d", len(lines), tt.wantLines)
			}
			if tt.wantLines > 0 && lines[0]["level"] != "debug" {
				t.Errorf("level = %v, want debug", lines[0]["level"])
			}
			if got := r.rej.Suppressed(); got != tt.wantSuppressed {
				t.Errorf("Suppressed = %d, want %d", got, tt.wantSuppressed)
			}
		})
	}
}

// failing is a backend that cannot decide.
type failing struct{}

func (failing) Apply(context.Context, *limits.Batch) error {
	return fmt.Errorf("dial tcp 127.0.0.1:1: %w", limits.ErrStoreUnavailable)
}

// TestRejectionLogFailureMode: a rejection by a failure mode says which,
// and why the store did not decide.
func TestRejectionLogFailureMode(t *testing.T) {
	for _, tt := range []struct {
		mode limits.FailureMode
		want string
		reqs int
	}{
		{limits.FailClosed, "failure_mode_closed", 1},
		{limits.FailLocal, "failure_mode_local", 2},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			eo := limits.EngineOptions{FailureMode: tt.mode, Local: memory.New(memory.Options{})}
			r := newRig(t, zapcore.InfoLevel, rejectlog.Options{Level: zapcore.InfoLevel, Rate: 10, Values: rejectlog.Plain}, failing{}, eo)
			for range tt.reqs {
				r.decide(t, aliceRequest())
			}
			lines := r.log.Lines(t, rejectlog.Message)
			if len(lines) != 1 {
				t.Fatalf("%d lines, want 1:\n%s", len(lines), r.log)
			}
			if got := lines[0]["decided_by"]; got != tt.want {
				t.Errorf("decided_by = %v, want %v", got, tt.want)
			}
			if got, _ := lines[0]["store_error"].(string); !strings.Contains(got, "store unavailable") {
				t.Errorf("store_error = %q, want the store's error", got)
			}
			// Failure mode closed rejects both descriptors, local only
			// alice's: hers is the last.
			overs := lines[0]["over"].([]any)
			over := overs[len(overs)-1].(map[string]any)
			if over["descriptor"] != 1.0 || over["key"] != aliceKey(t, r) {
				t.Errorf("over = %v, want alice's descriptor and key", overs)
			}
		})
	}
}

// BenchmarkRejectionLog is what the rejection log adds to one rejected
// request: at its default level in an info log (a level check), and at
// info under a flood, where the rate bound leaves the line out.
func BenchmarkRejectionLog(b *testing.B) {
	r := newRig(b, zap.InfoLevel, rejectlog.Options{Level: zapcore.DebugLevel, Rate: 10, Values: rejectlog.Hashed}, nil, limits.EngineOptions{})
	req := aliceRequest()
	var d limits.Decision
	for range 2 {
		if err := r.engine.Decide(context.Background(), req, &d); err != nil {
			b.Fatal(err)
		}
	}
	if d.Code != limits.OverLimit {
		b.Fatal("not rejected")
	}
	log, _ := logtest.JSON(zap.InfoLevel)
	for _, bc := range []struct {
		name  string
		level zapcore.Level
	}{{"debug", zapcore.DebugLevel}, {"info_flood", zapcore.InfoLevel}} {
		b.Run(bc.name, func(b *testing.B) {
			rej := rejectlog.New(log, rejectlog.Options{Level: bc.level, Rate: 10, Store: "memory"})
			for range 10 {
				rej.Rejected(req, &d) // the burst
			}
			b.ReportAllocs()
			for b.Loop() {
				rej.Rejected(req, &d)
			}
		})
	}
}
