package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

func TestRLQS(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, 0)
	r := m.RLQS()
	r.Streams(1)
	r.Streams(1)
	r.Streams(-1)
	r.Buckets(3)
	r.Usage("edge", 7, 2)
	r.Usage("", 1, 0)
	r.Assigned("edge", "token_bucket", "grant")
	r.Assigned("edge", "token_bucket", "grant")
	r.Assigned("edge", "deny_all", "dry")
	r.Granted("edge", 40, false)
	r.Granted("edge", 5, true)
	r.Returned("edge", 3)
	r.Pushed()
	want := `
# HELP ratelimit_sidecar_rlqs_streams Open RLQS streams (one per Envoy that uses the rate_limit_quota filter).
# TYPE ratelimit_sidecar_rlqs_streams gauge
ratelimit_sidecar_rlqs_streams 1
# HELP ratelimit_sidecar_rlqs_buckets Buckets subscribed on the open RLQS streams.
# TYPE ratelimit_sidecar_rlqs_buckets gauge
ratelimit_sidecar_rlqs_buckets 3
# HELP ratelimit_sidecar_rlqs_requests_total Requests Envoy decided by itself and reported over RLQS, by result: allowed or denied.
# TYPE ratelimit_sidecar_rlqs_requests_total counter
ratelimit_sidecar_rlqs_requests_total{domain="",result="allowed"} 1
ratelimit_sidecar_rlqs_requests_total{domain="edge",result="allowed"} 7
ratelimit_sidecar_rlqs_requests_total{domain="edge",result="denied"} 2
# HELP ratelimit_sidecar_rlqs_granted_hits_total Hits assigned to Envoy in token buckets, by store: shared (taken from Redis) or local (failure mode local).
# TYPE ratelimit_sidecar_rlqs_granted_hits_total counter
ratelimit_sidecar_rlqs_granted_hits_total{domain="edge",store="local"} 5
ratelimit_sidecar_rlqs_granted_hits_total{domain="edge",store="shared"} 40
# HELP ratelimit_sidecar_rlqs_pushes_total Messages of new assignments sent between reports: when a busy bucket's grant ends or runs out before the next report, its window turns, or a limit that ran dry can grant again.
# TYPE ratelimit_sidecar_rlqs_pushes_total counter
ratelimit_sidecar_rlqs_pushes_total 1
`
	names := []string{"ratelimit_sidecar_rlqs_streams", "ratelimit_sidecar_rlqs_buckets", "ratelimit_sidecar_rlqs_requests_total",
		"ratelimit_sidecar_rlqs_granted_hits_total", "ratelimit_sidecar_rlqs_pushes_total"}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]int{"ratelimit_sidecar_rlqs_assignments_total": 2, "ratelimit_sidecar_rlqs_returned_hits_total": 1} {
		if got := testutil.CollectAndCount(m.Registry, name); got != n {
			t.Errorf("%s: %d series, want %d", name, got, n)
		}
	}
}
