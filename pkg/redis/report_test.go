package redis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// failReports fails every apply.lua call in report mode ("2"): the call
// that, after a request across slots was rejected and its reservations
// refunded, asks the refunded slots what a rejected request reports.
type failReports struct{ failed atomic.Int64 }

var errReportFailed = errors.New("report call failed by the test")

func (h *failReports) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *failReports) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if isReport(cmd) {
			h.failed.Add(1)
			cmd.SetErr(errReportFailed)
			return errReportFailed
		}
		return next(ctx, cmd)
	}
}

func (h *failReports) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			if isReport(cmd) {
				h.failed.Add(1)
				for _, c := range cmds {
					c.SetErr(errReportFailed)
				}
				return errReportFailed
			}
		}
		return next(ctx, cmds)
	}
}

// isReport reports whether cmd is an apply.lua call in report mode: its
// mode follows the keys and the time (see evalshaAll).
func isReport(cmd goredis.Cmder) bool {
	args := cmd.Args()
	if cmd.Name() != "evalsha" && cmd.Name() != "eval" || len(args) < 5 {
		return false
	}
	keys, ok := args[2].(int)
	if !ok || len(args) <= 3+keys+1 {
		return false
	}
	mode := args[3+keys+1]
	if p, ok := mode.(*string); ok {
		mode = *p
	}
	return mode == "2"
}

// testReportFails: when a request across slots is rejected and the call
// that reports the refunded slots' state fails, those checks report
// Unknown, not the reservation's state after the hits, which no rejected
// request has (a tier with its last hit reserved read "0 left").
func testReportFails(t *testing.T, opts redis.Options) {
	clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	s := newStore(t, clocked(opts, clk.Now))
	h := &failReports{}
	redis.AddNodeHook(s, h)
	ban := mustLimit(t, limits.FixedWindow, 0, limits.UnitMinute, 1, 0)
	one := mustLimit(t, limits.FixedWindow, 1, limits.UnitHour, 1, 0)
	tenant, user := check("report/tenant", one, 1), check("report/user", ban, 1)
	if redis.Slot(tenant.Key) == redis.Slot(user.Key) {
		t.Fatalf("keys %q and %q share a slot: the test needs two", tenant.Key, user.Key)
	}
	b := apply(t, s, tenant, user)
	if b.Admitted || h.failed.Load() == 0 {
		t.Fatalf("admitted %v, %d report calls failed; want rejected, and a failed report", b.Admitted, h.failed.Load())
	}
	if got := b.Outcomes[0]; got != (limits.Outcome{Unknown: true}) {
		t.Errorf("refunded check whose report failed: %+v, want only Unknown", got)
	}
	if got, want := b.Outcomes[1], (limits.Outcome{Over: true, Reset: 50 * time.Second}); got != want {
		t.Errorf("rejecting check: %+v, want %+v", got, want)
	}
	// The reservation was refunded all the same.
	if b := apply(t, s, tenant); !b.Admitted {
		t.Errorf("tenant after the refund: %+v, want admitted", b.Outcomes)
	}
}
