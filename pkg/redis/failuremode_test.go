package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

const failureRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

func parseRules(t *testing.T, yaml string) *limits.Ruleset {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(yaml)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func decideUser(t *testing.T, e *limits.Engine) (limits.Code, error) {
	t.Helper()
	var d limits.Decision
	err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d)
	return d.Code, err
}

// TestFailureModesWithRedisKilled runs each failure mode against a real
// Redis that is killed: the engine must answer as the mode says, at once,
// through the circuit breaker, and go back to Redis when it returns.
func TestFailureModesWithRedisKilled(t *testing.T) {
	O, X := limits.OK, limits.OverLimit
	tests := []struct {
		mode limits.FailureMode
		// want is the code of 3 requests while Redis is down (limit 2).
		want    []limits.Code
		wantErr bool
	}{
		{mode: limits.FailOpen, want: []limits.Code{O, O, O}},
		{mode: limits.FailClosed, want: []limits.Code{X, X, X}},
		{mode: limits.FailLocal, want: []limits.Code{O, O, X}},
		{mode: limits.FailError, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := redistest.StartServer(t)
			rs := newStore(t, redis.Options{URL: urlOf(srv.Addr), Timeout: 50 * time.Millisecond})
			breaker := store.NewBreaker(rs, rs.Ping, store.BreakerOptions{Failures: 2, Cooldown: 20 * time.Millisecond})
			t.Cleanup(breaker.Close)
			e := limits.NewEngine(parseRules(t, failureRules), breaker, limits.EngineOptions{FailureMode: tt.mode, Local: memory.New(memory.Options{})})

			if code, err := decideUser(t, e); err != nil || code != O {
				t.Fatalf("with Redis up: %v, %v", code, err)
			}
			srv.Kill()
			for i := range 3 {
				start := time.Now()
				code, err := decideUser(t, e)
				if took := time.Since(start); took > time.Second {
					t.Errorf("request %d took %v with Redis down", i, took)
				}
				switch {
				case tt.wantErr:
					if !errors.Is(err, limits.ErrStoreUnavailable) {
						t.Errorf("request %d: err = %v, want ErrStoreUnavailable", i, err)
					}
				case err != nil || code != tt.want[i]:
					t.Errorf("request %d: %v, %v; want %v", i, code, err, tt.want[i])
				}
			}
			if !breaker.Open() {
				t.Error("breaker still closed after 3 failures (threshold 2)")
			}

			// Redis returns, empty: the breaker's probe closes it and
			// requests are decided by Redis again (a fresh counter: 2 OK,
			// then over limit).
			srv.Restart(t)
			deadline := time.Now().Add(10 * time.Second)
			for breaker.Open() {
				if time.Now().After(deadline) {
					t.Fatal("breaker did not close within 10s of Redis coming back")
				}
				time.Sleep(10 * time.Millisecond)
			}
			var got []limits.Code
			for range 3 {
				code, err := decideUser(t, e)
				if err != nil {
					t.Fatalf("after recovery: %v", err)
				}
				got = append(got, code)
			}
			if want := []limits.Code{O, O, X}; !equalCodes(got, want) {
				t.Errorf("after recovery: %v, want %v (decided by Redis)", got, want)
			}
		})
	}
}

func equalCodes(a, b []limits.Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
