package xds_test

import (
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// awaitState waits, by the client's logs, for its State to satisfy ok.
func (c *client) awaitState(t *testing.T, what string, ok func(xds.State) bool) xds.State {
	t.Helper()
	deadline := time.NewTimer(xdstest.Wait)
	defer deadline.Stop()
	for {
		if st := c.State(); ok(st) {
			return st
		}
		select {
		case <-c.logged:
		case <-deadline.C:
			t.Fatalf("State never %s within %v: %+v", what, xdstest.Wait, c.State())
		}
	}
}

// TestState: a client whose server has no snapshot for it (Envoy
// Gateway's settings: serving before the first push) is connected, with
// no rules received and no push yet; the first push sets both; a server
// that goes leaves it unconnected. The sidecar's xds_* gauges read this.
func TestState(t *testing.T) {
	srv := xdstest.Start(t)
	c := startClient(t, fast(xds.Options{Server: srv.Addr, StartWithoutRules: true, AllowEmpty: true}))
	st := c.awaitState(t, "connected", func(st xds.State) bool { return st.Connected })
	if st.Applied || !st.LastPush.IsZero() {
		t.Errorf("before any push: %+v, want no rules received and no push", st)
	}

	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatal(a.err)
	}
	if st := c.State(); !st.Applied || st.LastPush.IsZero() {
		t.Errorf("after the first push: %+v, want rules received and a push", st)
	}

	srv.Stop()
	c.awaitState(t, "unconnected", func(st xds.State) bool { return !st.Connected })
}
