package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// perUserRules limit every user on its own counter: a bucket keyed per
// user is served from a limit whatever its id.
const perUserRules = `
domain: rlqs
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`

// TestChurningBucketsLeaveEnvoy: an Envoy whose bucket ids churn (each
// report interval n new ids get a request, and the ids before get none
// again, as buckets keyed per user or per address do) holds a bounded
// number of buckets, and so sends a bounded report, because the server
// abandons the ones that no longer get requests: a kept bucket after
// IdleAfter (a minute by default, twelve reports), one not kept (no rule, or
// refused past MaxBuckets) at its first report without requests. Before,
// a kept or unmatched bucket was abandoned only after 10 minutes and a
// refused one never, so the Envoy held every id it had ever seen.
func TestChurningBucketsLeaveEnvoy(t *testing.T) {
	const (
		n        = 50 // new ids each report
		reports  = 30
		interval = 5 * time.Second
		// A kept bucket goes at the twelfth report after its last
		// request, so at most 13 intervals of ids are held, and one more
		// is sent.
		most = 14 * n
	)
	tests := []struct {
		name string
		key  string // of the ids: user has a rule, path none
		o    rlqs.Options
	}{
		{"served", "user", rlqs.Options{}},
		{"no rule", "path", rlqs.Options{}},
		{"refused past MaxBuckets", "user", rlqs.Options{MaxBuckets: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, perUserRules, limits.EngineOptions{}, tt.o)
			e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
			largest := 0
			for r := range reports {
				for j := range n {
					mustRequest(t, e, map[string]string{tt.key: fmt.Sprintf("%d-%d", r, j)})
				}
				largest = max(largest, e.Buckets())
				s.clk.Advance(interval)
				mustReport(t, e)
			}
			t.Logf("after %d reports of %d new ids: the Envoy holds at most %d buckets (%d at the end), the server %d; %v",
				reports, n, largest, e.Buckets(), s.m.BucketsHeld(), s.m.Assignments())
			if largest > most {
				t.Errorf("the Envoy held up to %d buckets, want at most %d", largest, most)
			}
			if held := s.m.BucketsHeld(); held > most {
				t.Errorf("the server holds %d buckets, want at most %d", held, most)
			}
		})
	}
}

// TestBucketCreatedWhileDown: a bucket whose first request comes while
// the stream is down sends no subscription (Envoy logs that the stream is
// closed): the server first sees it in the next report, on the new
// stream, and serves it from there.
func TestBucketCreatedWhileDown(t *testing.T) {
	s := startServer(t, perUserRules, limits.EngineOptions{}, rlqs.Options{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e := dialEnvoy(t, s.addr, "rlqs", s.clk.Now)
	mustRequest(t, e, map[string]string{"user": "a"})
	e.Close() // the stream is down
	bob := map[string]string{"user": "b"}
	if _, err := e.Request(bob); err != nil {
		t.Fatalf("a new bucket while the stream is down: %v; want it decided by no_assignment_behavior, and no subscription", err)
	}
	if n := s.m.Count("token_bucket/grant"); n != 1 {
		t.Fatalf("%d grants; want 1, the first bucket's: the second sent no subscription", n)
	}
	if err := e.Reconnect(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
	mustReport(t, e)
	if e.Strategy(bob).GetTokenBucket() == nil {
		t.Errorf("after the next report on the new stream: %v; want a token bucket", e.Strategy(bob))
	}
}
