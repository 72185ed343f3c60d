package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// XDSState is what an xDS rule source knows of its server: xds.State.
type XDSState struct {
	Connected bool      // a stream to the server is open
	LastPush  time.Time // zero: no push yet
	Applied   bool      // a push's rules have been in use
	// OverlayUnmatched counts the --xds-overlay entries that match
	// nothing in the rules in use.
	OverlayUnmatched int
}

// XDS registers the metrics of an xDS rule source, read from state at
// scrape time: whether a stream is open, whether the server has ever
// delivered rules, and when it last pushed. The rules in use are
// config_info's checksum, as for rule files.
func (m *Metrics) XDS(state func() XDSState) {
	gauge := func(name, help string, f func(XDSState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help},
			func() float64 { return f(state()) })
	}
	m.Registry.MustRegister(
		gauge("xds_connected", "1 while a stream to the xDS server is open (--config-type xds).",
			func(s XDSState) float64 { return b2f(s.Connected) }),
		gauge("xds_rules_received", "1 once the xDS server has delivered rules that are in use; 0 while the sidecar runs on none (with --force-start-without-rules it answers OK to every request meanwhile).",
			func(s XDSState) float64 { return b2f(s.Applied) }),
		gauge("xds_last_push_timestamp_seconds", "When the xDS server last pushed, accepted or not, in Unix seconds; 0 if it never has. A server pushes only when the rules change, so a quiet server is not a fault by itself.",
			func(s XDSState) float64 {
				if s.LastPush.IsZero() {
					return 0
				}
				return float64(s.LastPush.UnixNano()) / 1e9
			}),
		gauge("xds_overlay_unmatched_entries", "Entries of --xds-overlay that match nothing in the rules in use: the push was applied without them (docs/xds.md).",
			func(s XDSState) float64 { return float64(s.OverlayUnmatched) }),
	)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
