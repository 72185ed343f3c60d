package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// server is an RLQS server on a shared store and an engine, for tests
// that need no Redis: the memory store grants hits as Redis does.
type server struct {
	addr   string
	clk    *storetest.Clock
	shared *failing
	m      *rlqstest.Metrics
}

// failing is a store that fails every call while down is set.
type failing struct {
	next limits.Store
	mu   sync.Mutex
	down bool
}

func (f *failing) Apply(ctx context.Context, b *limits.Batch) error {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return errors.New("store down")
	}
	return f.next.Apply(ctx, b)
}

func (f *failing) setDown(d bool) {
	f.mu.Lock()
	f.down = d
	f.mu.Unlock()
}

func startServer(t testing.TB, rules string, eo limits.EngineOptions, o rlqs.Options) *server {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{clk: storetest.NewClock(storetest.Epoch.Add(time.Second)), m: &rlqstest.Metrics{}}
	s.shared = &failing{next: memory.New(memory.Options{Now: s.clk.Now})}
	if eo.Local != nil {
		eo.Local = memory.New(memory.Options{Now: s.clk.Now})
	}
	engine := limits.NewEngine(rs, s.shared, eo)
	o.Now, o.Metrics, o.AfterFunc = s.clk.Now, s.m, s.clk.AfterFunc
	s.addr = rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, engine, s.shared, zaptest.NewLogger(t), o) })
	return s
}

func mustRequest(t *testing.T, e *rlqstest.Envoy, id map[string]string) bool {
	t.Helper()
	ok, err := e.Request(id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func mustReport(t *testing.T, e *rlqstest.Envoy) {
	t.Helper()
	if err := e.Report(); err != nil {
		t.Fatal(err)
	}
}

// spend makes up to n requests and returns how many were allowed.
func spend(t *testing.T, e *rlqstest.Envoy, id map[string]string, n int) int {
	t.Helper()
	got := 0
	for range n {
		if mustRequest(t, e, id) {
			got++
		}
	}
	return got
}

// TestBucketLateSpend: an Envoy may spend a grant on a bucket until its
// time to live ends, seconds after the store counted it, while the bucket
// refills and other Envoys take the refill. The reserve keeps what the
// fleet spends at any moment within the burst: here one Envoy takes a
// grant, the bucket refills for four seconds, a second Envoy takes all
// it can, and then both spend everything at once.
func TestBucketLateSpend(t *testing.T) {
	for _, alg := range []string{"token_bucket", "leaky_bucket"} {
		t.Run(alg, func(t *testing.T) {
			const burst = 40
			s := startServer(t, `
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {algorithm: `+alg+`, unit: minute, requests_per_unit: 60, burst: 40, lease: 40}
`, limits.EngineOptions{}, rlqs.Options{})
			id := map[string]string{"route": "api"}
			a := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
			b := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
			mustRequest(t, a, id) // subscribes: A holds a grant
			s.clk.Advance(4 * time.Second)
			mustRequest(t, b, id)
			total := 0
			for range 20 { // B spends and asks again until the bucket is dry
				n := spend(t, b, id, burst)
				total += n
				mustReport(t, b)
				if n == 0 {
					break
				}
			}
			late := spend(t, a, id, burst)
			t.Logf("B took %d after the refill; A spent %d granted four seconds earlier", total, late)
			if late == 0 || total == 0 {
				t.Fatalf("A spent %d and B %d: the test needs both to hold quota", late, total)
			}
			if total+late > burst {
				t.Errorf("%d admitted at one moment, more than the burst %d", total+late, burst)
			}
		})
	}
}

// TestNotServed: a bucket whose rule RLQS cannot serve exactly is
// answered by its domain's failure mode, and the reason is counted.
func TestNotServed(t *testing.T) {
	tests := []struct {
		name, limit, mode string
		want              typev3.RateLimitStrategy_BlanketRule
	}{
		{"sliding log", "{algorithm: sliding_log, unit: minute, requests_per_unit: 10}", "closed", typev3.RateLimitStrategy_DENY_ALL},
		{"sliding log, failing open", "{algorithm: sliding_log, unit: minute, requests_per_unit: 10}", "open", typev3.RateLimitStrategy_ALLOW_ALL},
		{"burst too small", "{algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}", "closed", typev3.RateLimitStrategy_DENY_ALL},
		{"window too short", "{unit: second, requests_per_unit: 10}", "closed", typev3.RateLimitStrategy_DENY_ALL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, "domain: rlqs\nfailure_mode: "+tt.mode+"\ndescriptors:\n  - key: route\n    rate_limit: "+tt.limit+"\n",
				limits.EngineOptions{}, rlqs.Options{})
			e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
			id := map[string]string{"route": "x"}
			mustRequest(t, e, id)
			got := e.Strategy(id)
			if got.GetBlanketRule() != tt.want || got.GetTokenBucket() != nil {
				t.Errorf("assigned %v, want %v", got, tt.want)
			}
			if n := s.m.Count(map[bool]string{true: "allow_all", false: "deny_all"}[tt.mode == "open"] + "/unsupported"); n != 1 {
				t.Errorf("%d assignments counted as unsupported, want 1", n)
			}
		})
	}
}

// TestStoreDown: while the shared store fails, grants follow the
// domain's failure mode: open allows all, closed denies all, local
// grants from the local store, each limit divided by the replicas.
func TestStoreDown(t *testing.T) {
	for _, tt := range []struct {
		mode string
		want string // assigned action/reason
	}{
		{"open", "allow_all/store_error"},
		{"closed", "deny_all/store_error"},
		{"local", "token_bucket/local"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			s := startServer(t, "domain: rlqs\nfailure_mode: "+tt.mode+"\ndescriptors:\n  - key: route\n    rate_limit: {unit: minute, requests_per_unit: 90, lease: 90}\n",
				limits.EngineOptions{Local: memory.New(memory.Options{}), LocalDivisor: 3}, rlqs.Options{})
			s.shared.setDown(true)
			e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
			id := map[string]string{"route": "api"}
			mustRequest(t, e, id)
			if n := s.m.Count(tt.want); n != 1 {
				t.Fatalf("assignments %v; want one %s", s.m.Assignments(), tt.want)
			}
			if tt.mode != "local" {
				return
			}
			// The local share is 90/3 = 30 a minute; a grant takes at
			// most half of what is left, so the Envoy spends at most 29.
			total := 0
			for range 10 {
				total += spend(t, e, id, 30)
				mustReport(t, e)
			}
			if total == 0 || total > 30 {
				t.Errorf("%d admitted from the local store, want 1..30 (the share)", total)
			}
			// The store back: grants come from it again.
			s.shared.setDown(false)
			s.clk.Advance(time.Minute)
			spend(t, e, id, 1)
			mustReport(t, e)
			if n := s.m.Count("token_bucket/grant"); n == 0 {
				t.Errorf("assignments %v; want a grant from the shared store once it is back", s.m.Assignments())
			}
		})
	}
}

// TestIdleAbandon: a bucket with no requests for IdleAfter is abandoned,
// which frees its room on the stream.
func TestIdleAbandon(t *testing.T) {
	s := startServer(t, fleetRules, limits.EngineOptions{}, rlqs.Options{IdleAfter: 30 * time.Second})
	e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	id := map[string]string{"route": "api"}
	mustRequest(t, e, id)
	for range 3 {
		s.clk.Advance(10 * time.Second)
		mustReport(t, e)
	}
	if e.Buckets() != 0 || s.m.Count("abandon/idle") != 1 {
		t.Fatalf("after 30s idle: the Envoy holds %d buckets, %d abandoned; want 0 and 1", e.Buckets(), s.m.Count("abandon/idle"))
	}
	if s.m.BucketsHeld() != 0 {
		t.Errorf("the server counts %d buckets, want 0", s.m.BucketsHeld())
	}
	if !mustRequest(t, e, id) && e.Strategy(id) == nil {
		t.Errorf("a request after the abandon did not subscribe the bucket again")
	}
}

// TestWindowLateSpend: hits granted on a fixed window are counted in the
// window they were granted in, so Envoy must not be able to spend them in
// the next: the grant's time to live ends before its window does. Here
// one Envoy takes a grant and waits for the next window, in which a
// second Envoy takes all it can; then the first tries to spend.
func TestWindowLateSpend(t *testing.T) {
	const limit = 100
	s := startServer(t, fleetRules, limits.EngineOptions{}, rlqs.Options{})
	id := map[string]string{"route": "api"}
	a := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	b := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	mustRequest(t, a, id)
	if a.Strategy(id).GetTokenBucket() == nil {
		t.Fatalf("A was assigned %v, want a token bucket", a.Strategy(id))
	}
	mustReport(t, a) // nothing used: A is idle, and gets no grant pushed in the next window
	s.clk.Advance(time.Minute)
	mustRequest(t, b, id)
	total := 0
	for range 40 {
		n := spend(t, b, id, limit)
		total += n
		mustReport(t, b)
		if n == 0 && b.Strategy(id).GetTokenBucket() == nil {
			break
		}
	}
	late := spend(t, a, id, limit)
	t.Logf("B took %d in the window; A spent %d granted in the window before; A now holds %v", total, late, a.Strategy(id))
	if total+late > limit {
		t.Errorf("%d admitted in one window (B %d, A %d from the window before), more than the limit %d", total+late, total, late, limit)
	}
	if total < limit-2*10 {
		t.Errorf("B took %d of the window's %d", total, limit)
	}
}

// TestSidecarRestart: Envoy holds its grants, so a sidecar that stops
// loses none of them: Envoy keeps its assignment while its stream is
// down and spends it until its time to live, then reports on a stream to
// the sidecar that replaced it. The window still admits at most its
// limit.
func TestSidecarRestart(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(fleetRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	shared := memory.New(memory.Options{Now: clk.Now})
	serve := func() (*grpc.Server, string) {
		g := grpc.NewServer()
		engine := limits.NewEngine(rs, shared, limits.EngineOptions{})
		rlqs.Register(g, engine, shared, zaptest.NewLogger(t), rlqs.Options{Now: clk.Now})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(lis) //nolint:errcheck // ends with Stop
		t.Cleanup(g.Stop)
		return g, lis.Addr().String()
	}
	first, addr := serve()
	e := dialEnvoy(t, addr, "rlqs", clk.Now)
	id := map[string]string{"route": "api"}
	mustRequest(t, e, id)
	admitted := spend(t, e, id, 1)
	mustReport(t, e)
	first.Stop()
	// The stream is gone; the assignment is not.
	held := spend(t, e, id, 100)
	if held == 0 {
		t.Fatalf("nothing admitted from the assignment after the sidecar stopped (%v)", e.Strategy(id))
	}
	admitted += held
	_, addr = serve()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := e.Reconnect(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		admitted += spend(t, e, id, 100)
		mustReport(t, e)
	}
	t.Logf("%d admitted in the window, %d of them while the sidecar was down", admitted, held)
	if admitted > 100 || admitted < 100-10-1 {
		t.Errorf("%d admitted in the window across the restart, want 89..100", admitted)
	}
}

// TestPush: between reports the server pushes a new grant to a busy
// bucket when its window turns (here a second after the Envoy's last
// report), and before a bucket's grant ends when Envoy reports less
// often than grants live; a bucket whose last report held no requests
// gets none.
func TestPush(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		s := startServer(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`, limits.EngineOptions{}, rlqs.Options{})
		busy, idle := map[string]string{"route": "api"}, map[string]string{"route": "idle"}
		e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
		mustRequest(t, e, busy)
		mustRequest(t, e, idle)
		for s.clk.Now().Sub(storetest.Epoch) < 59*time.Second {
			s.clk.Advance(time.Second)
			spend(t, e, busy, 1)
			mustReport(t, e)
		}
		before := s.m.Pushes()
		s.clk.Advance(1100 * time.Millisecond) // 100 ms into the next window
		if err := e.Sync(s.m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if s.m.Pushes() != before+1 {
			t.Errorf("%d messages pushed at the window's turn, want 1", s.m.Pushes()-before)
		}
		if got := e.Strategy(busy); got.GetTokenBucket() == nil || !mustRequest(t, e, busy) {
			t.Errorf("busy bucket 100 ms into the window, before any report: assigned %v; want a grant it can spend", got)
		}
		if got := e.Strategy(idle); got != nil {
			t.Errorf("idle bucket was pushed %v", got)
		}
	})
	t.Run("refresh", func(t *testing.T) {
		// A grant at 1.5 s into a minute may live 57.5 s (to the margin
		// before the window's end), which Envoy reads as 57: sent again
		// at 57.9 s for one second, it lives to 58.9 s.
		s := startServer(t, fleetRules, limits.EngineOptions{}, rlqs.Options{})
		s.clk.Advance(500 * time.Millisecond)
		e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
		id := map[string]string{"route": "api"}
		mustRequest(t, e, id)
		s.clk.Advance(57*time.Second + 300*time.Millisecond) // 58.8 s into the window
		if err := e.Sync(s.m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if got := e.Strategy(id); got.GetTokenBucket() == nil || s.m.Count("token_bucket/refresh") != 1 {
			t.Errorf("58.8 s into the window: assigned %v after %d refreshes; want the grant, refreshed once", got, s.m.Count("token_bucket/refresh"))
		}
		if !mustRequest(t, e, id) {
			t.Errorf("58.8 s into the window: the refreshed grant lost its tokens")
		}
	})
	t.Run("bucket", func(t *testing.T) {
		s := startServer(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 600, burst: 600, lease: 100}
`, limits.EngineOptions{}, rlqs.Options{})
		id := map[string]string{"route": "api"}
		e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
		mustRequest(t, e, id)
		pushes := 0
		for i := range 60 {
			s.clk.Advance(time.Second)
			if err := e.Sync(s.m.Pushes()); err != nil {
				t.Fatal(err)
			}
			if !mustRequest(t, e, id) {
				t.Errorf("second %d: denied at 1 request a second against 10 a second", i+1)
			}
			if i%10 == 9 { // Envoy reports every 10 s, grants live 6 s
				mustReport(t, e)
			}
			pushes = s.m.Pushes()
		}
		if pushes == 0 {
			t.Errorf("no push in a minute of reports every 10 s")
		}
	})
}

// TestPushesLoseNothing: a report after a push may hold requests spent
// from the grant the push replaced; they must not be charged to the new
// grant, which would then be replaced before it is spent, losing what it
// held. One Envoy past its limit at a steady rate through a window
// admits the whole limit but the last hit, which a grant never takes,
// and what the estimate of the replaced grant's share is off by.
func TestPushesLoseNothing(t *testing.T) {
	s := startServer(t, fleetRules, limits.EngineOptions{}, rlqs.Options{})
	e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	id := map[string]string{"route": "api"}
	admitted := 0
	for i := range 580 { // 5 requests a second, one every 200 ms
		if i%2 == 0 {
			admitted += spend(t, e, id, 1)
		}
		s.clk.Advance(100 * time.Millisecond)
		if err := e.Sync(s.m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			mustReport(t, e)
		}
	}
	// Which requests came from the replaced grant is estimated from the
	// reported rate: at one request per 200 ms, each push may be off by
	// one request, which the new grant is charged for and so loses.
	pushes := s.m.Pushes()
	t.Logf("%d admitted, %d pushes", admitted, pushes)
	if admitted > 99 || admitted < 99-pushes || pushes > 5 {
		t.Errorf("%d admitted in the window with %d pushes, want 99 less at most one a push, and a few pushes", admitted, pushes)
	}
}

// TestTopUpBeyondTheLease: one Envoy spending twice a lease per second,
// reporting every 5 s, against a limit far away: grants are topped up
// as the reported rate spends them, so the lease does not cap its rate.
func TestTopUpBeyondTheLease(t *testing.T) {
	s := startServer(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000000, lease: 10}
`, limits.EngineOptions{}, rlqs.Options{})
	e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	id := map[string]string{"route": "api"}
	mustRequest(t, e, id)
	var admitted, sent int
	for i := range 600 { // a minute in steps of 100 ms, 2 requests each: 20/s
		if i >= 50 { // after the first report, which tells the rate
			sent += 2
			admitted += spend(t, e, id, 2)
		} else {
			spend(t, e, id, 2)
		}
		s.clk.Advance(100 * time.Millisecond)
		if err := e.Sync(s.m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			mustReport(t, e)
		}
	}
	t.Logf("%d of %d admitted after the first report; %d pushes", admitted, sent, s.m.Pushes())
	if admitted < sent*9/10 {
		t.Errorf("%d of %d admitted at 20/s with a lease of 10 and a limit far away, want 90%% or more", admitted, sent)
	}
}

// TestPushesCoalesce: a stream's buckets come due at times of their own,
// and each push visits every bucket of the stream; so that an Envoy with
// many buckets cannot make the server wake once per bucket, pushes due
// within pushQuantum of the last go together. Here 200 busy buckets
// subscribed a millisecond apart are all topped up, in few messages.
func TestPushesCoalesce(t *testing.T) {
	s := startServer(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 600000, burst: 600000, lease: 100}
`, limits.EngineOptions{}, rlqs.Options{})
	e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	const n = 200
	for i := range n {
		mustRequest(t, e, map[string]string{"route": fmt.Sprint(i)})
		s.clk.Advance(time.Millisecond)
	}
	if err := e.Sync(s.m.Pushes()); err != nil {
		t.Fatal(err)
	}
	grants := s.m.Count("token_bucket/grant")
	s.clk.Advance(6 * time.Second) // every grant's time to live ends: each is pushed anew
	if err := e.Sync(s.m.Pushes()); err != nil {
		t.Fatal(err)
	}
	pushed := s.m.Count("token_bucket/grant") - grants
	t.Logf("%d grants pushed in %d messages", pushed, s.m.Pushes())
	if pushed < n {
		t.Errorf("%d grants pushed, want all %d buckets", pushed, n)
	}
	if s.m.Pushes() > 20 {
		t.Errorf("%d messages pushed for %d buckets due over 200 ms, want them together (at most 20)", s.m.Pushes(), n)
	}
}
