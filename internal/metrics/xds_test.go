package metrics_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// TestXDS: the xDS gauges follow the rule source's state at each
// scrape: 0 before the server has pushed (the sidecar serving without
// rules), then the push's time and the rules received, and not
// connected once the server goes.
func TestXDS(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	st := metrics.XDSState{Connected: true}
	m.XDS(func() metrics.XDSState { return st })
	scrape := func(want [4]float64) {
		t.Helper()
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got [4]float64
		for _, f := range fams {
			for i, name := range []string{"ratelimit_sidecar_xds_connected", "ratelimit_sidecar_xds_rules_received",
				"ratelimit_sidecar_xds_last_push_timestamp_seconds", "ratelimit_sidecar_xds_overlay_unmatched_entries"} {
				if f.GetName() == name {
					got[i] = f.GetMetric()[0].GetGauge().GetValue()
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("connected, rules received, last push, overlay unmatched (-want +got):\n%s", diff)
		}
	}
	scrape([4]float64{1, 0, 0, 0})
	st = metrics.XDSState{Connected: true, LastPush: time.Unix(1700000000, 5e8), Applied: true, OverlayUnmatched: 2}
	scrape([4]float64{1, 1, 1700000000.5, 2})
	st.Connected = false
	scrape([4]float64{0, 1, 1700000000.5, 2})
}
