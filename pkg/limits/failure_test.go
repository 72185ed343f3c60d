package limits_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// downStore is a Store whose backend is down while down is set. It stands
// for an unreachable Redis in engine tests; the Redis store's own tests
// kill a real redis-server.
type downStore struct {
	down  atomic.Bool
	calls atomic.Int64
	up    limits.Store
}

func (s *downStore) Apply(ctx context.Context, b *limits.Batch) error {
	s.calls.Add(1)
	if s.down.Load() {
		return fmt.Errorf("dial 127.0.0.1:1: connection refused: %w", limits.ErrStoreUnavailable)
	}
	return s.up.Apply(ctx, b)
}

func (s *downStore) ping(context.Context) error {
	if s.down.Load() {
		return limits.ErrStoreUnavailable
	}
	return nil
}

const failureRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4}
`

func decideN(t *testing.T, e *limits.Engine, domain string, n int) []limits.Code {
	t.Helper()
	var codes []limits.Code
	for range n {
		var d limits.Decision
		err := e.Decide(context.Background(), &limits.Request{Domain: domain, Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		codes = append(codes, d.Code)
	}
	return codes
}

func TestFailureModes(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	O, X := limits.OK, limits.OverLimit
	tests := []struct {
		mode    limits.FailureMode
		divisor uint64
		want    []limits.Code
	}{
		{limits.FailOpen, 1, []limits.Code{O, O, O, O, O, O}},
		{limits.FailClosed, 1, []limits.Code{X, X}},
		{limits.FailLocal, 1, []limits.Code{O, O, O, O, X}},
		// Two replicas share the limit of 4: each admits 2 alone.
		{limits.FailLocal, 2, []limits.Code{O, O, X}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode, "/", tt.divisor), func(t *testing.T) {
			rs := parseRules(t, failureRules)
			store := &downStore{up: limits.NewMemoryStore(limits.WithClock(clk.Now))}
			store.down.Store(true)
			e := limits.NewEngine(rs, store, limits.DefaultRequestLimits,
				limits.WithFailureMode(tt.mode),
				limits.WithLocalFallback(limits.NewMemoryStore(limits.WithClock(clk.Now)), tt.divisor))
			got := decideN(t, e, "edge", len(tt.want))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("codes = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("error", func(t *testing.T) {
		store := &downStore{up: limits.NewMemoryStore()}
		store.down.Store(true)
		e := limits.NewEngine(parseRules(t, failureRules), store, limits.DefaultRequestLimits, limits.WithFailureMode(limits.FailError))
		var d limits.Decision
		err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d)
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Errorf("err = %v, want one wrapping ErrStoreUnavailable", err)
		}
	})

	t.Run("open reports no limit", func(t *testing.T) {
		store := &downStore{up: limits.NewMemoryStore()}
		store.down.Store(true)
		e := limits.NewEngine(parseRules(t, failureRules), store, limits.DefaultRequestLimits, limits.WithFailureMode(limits.FailOpen))
		var d limits.Decision
		if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Statuses[0].Limit != nil || d.StoreErr == nil || d.Fallback != limits.FailOpen {
			t.Errorf("status %+v, store error %v, fallback %v; want no limit, the error, open", d.Statuses[0], d.StoreErr, d.Fallback)
		}
	})
}

func TestFailureModePerDomain(t *testing.T) {
	files := []limits.File{
		{Name: "open.yaml", Data: []byte("domain: a\nfailure_mode: closed\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
	}
	rs, err := limits.Parse(files, limits.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &downStore{up: limits.NewMemoryStore()}
	store.down.Store(true)
	e := limits.NewEngine(rs, store, limits.DefaultRequestLimits, limits.WithFailureMode(limits.FailOpen))
	if got := decideN(t, e, "a", 1); got[0] != limits.OverLimit {
		t.Errorf("domain a (failure_mode: closed) = %v, want OVER_LIMIT", got)
	}
	if got := decideN(t, e, "b", 1); got[0] != limits.OK {
		t.Errorf("domain b (engine default open) = %v, want OK", got)
	}
}

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &downStore{up: limits.NewMemoryStore()}
		var changes []bool
		b := limits.NewBreaker(store, store.ping, limits.BreakerOptions{
			Failures: 3, Cooldown: 500 * time.Millisecond,
			OnChange: func(open bool, _ error) { changes = append(changes, open) },
		})
		defer b.Close()
		l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
		apply := func() error {
			return b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Slot: 3, Limit: l, Hits: 1}}})
		}

		store.down.Store(true)
		for i := range 3 {
			if err := apply(); !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, limits.ErrBreakerOpen) {
				t.Fatalf("failure %d: err = %v, want the store's own error", i, err)
			}
		}
		if !b.Open() {
			t.Fatal("breaker closed after 3 consecutive failures")
		}
		calls := store.calls.Load()
		for range 100 {
			if err := apply(); !errors.Is(err, limits.ErrBreakerOpen) {
				t.Fatalf("err = %v while open, want ErrBreakerOpen", err)
			}
		}
		if n := store.calls.Load() - calls; n != 0 {
			t.Errorf("open breaker sent %d requests to the store, want 0", n)
		}

		// Probes keep failing while the store is down...
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !b.Open() {
			t.Fatal("breaker closed while the store is still down")
		}
		// ...and the first probe after it comes back closes the breaker.
		store.down.Store(false)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if b.Open() {
			t.Fatal("breaker still open one cooldown after the store came back")
		}
		if err := apply(); err != nil {
			t.Errorf("after recovery: %v", err)
		}
		if fmt.Sprint(changes) != "[true false]" {
			t.Errorf("OnChange calls = %v, want [true false]", changes)
		}
	})
}

func TestBreakerSuccessResetsCount(t *testing.T) {
	store := &downStore{up: limits.NewMemoryStore()}
	b := limits.NewBreaker(store, store.ping, limits.BreakerOptions{Failures: 3})
	defer b.Close()
	l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
	for range 5 {
		for _, down := range []bool{true, true, false} {
			store.down.Store(down)
			b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Slot: 3, Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
		}
	}
	if b.Open() {
		t.Error("breaker opened on failures that were never 3 in a row")
	}
}

func parseRules(t *testing.T, yaml string) *limits.Ruleset {
	t.Helper()
	rs, err := limits.Parse([]limits.File{{Name: "rules.yaml", Data: []byte(yaml)}}, limits.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
