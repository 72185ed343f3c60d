package rlqs_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const fleetRules = `
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`

// startSidecar serves RLQS for rules on its own Redis store (on srv,
// under prefix, deciding by clk) and its own loopback listener, and
// returns the listener's address.
func startSidecar(t *testing.T, rules string, srv *redistest.Server, prefix string, clk *storetest.Clock) string {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: prefix, Timeout: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	engine := limits.NewEngine(rs, st, limits.EngineOptions{})
	g := grpc.NewServer()
	rlqs.NewServer(engine, st, zaptest.NewLogger(t), rlqs.Options{Now: clk.Now, Return: st}).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// TestFleetFixedWindow runs three Envoys, each on its own sidecar, all on
// one Redis, over two and a half minutes of the test's clock, each
// trying five requests a second into one bucket of a fixed window of 100
// a minute (lease 10): in every minute the fleet admits at most 100, and
// at least 100 less one lease per Envoy and the hit a grant never takes.
func TestFleetFixedWindow(t *testing.T) {
	srv := redistest.StartServer(t)
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	var envoys []*rlqstest.Envoy
	for range 3 {
		addr := startSidecar(t, fleetRules, srv, "rlqs:fleet:", clk)
		envoys = append(envoys, dialEnvoy(t, addr, "rlqs", clk.Now))
	}
	const (
		limit     = 100
		lease     = 10
		perSecond = 5
		seconds   = 150
	)
	bucket := map[string]string{"route": "api"}
	admitted := map[int64]uint64{} // by minute since Epoch
	for range seconds {
		for _, e := range envoys {
			for range perSecond {
				ok, err := e.Request(bucket)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					admitted[int64(clk.Now().Sub(storetest.Epoch)/time.Minute)]++
				}
			}
		}
		clk.Advance(time.Second)
		for _, e := range envoys {
			if err := e.Report(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for m := range int64(seconds / 60) {
		got := admitted[m]
		t.Logf("minute %d: %d admitted", m, got)
		if got > limit {
			t.Errorf("minute %d: %d admitted, more than the limit %d", m, got, limit)
		}
		if floor := uint64(limit - len(envoys)*lease - 1); got < floor {
			t.Errorf("minute %d: %d admitted, fewer than %d", m, got, floor)
		}
	}
}

// dialEnvoy opens an RLQS stream to addr for domain, as Envoy's filter
// with no_assignment_behavior DENY_ALL, on the clock now.
func dialEnvoy(t testing.TB, addr, domain string, now func() time.Time) *rlqstest.Envoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e, err := rlqstest.Dial(context.Background(), conn, domain, rlqstest.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
