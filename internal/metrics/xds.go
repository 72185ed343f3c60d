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
	gauge := func(d xdsGauge) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: d.name, Help: d.help},
			func() float64 { return d.value(state()) })
	}
	for _, d := range xdsGauges {
		m.Registry.MustRegister(gauge(d))
	}
}

// xdsGauge is one gauge of an xDS rule source's state.
type xdsGauge struct {
	name, help string
	value      func(XDSState) float64
}

var xdsGauges = []xdsGauge{
	{"xds_connected", "1 while a stream to the xDS server is open (--config-type xds).",
		func(s XDSState) float64 { return b2f(s.Connected) }},
	{"xds_rules_received", "1 once the xDS server has delivered rules that are in use; 0 while the sidecar runs on none (with --force-start-without-rules it answers OK to every request meanwhile).",
		func(s XDSState) float64 { return b2f(s.Applied) }},
	{"xds_last_push_timestamp_seconds", "When the xDS server last pushed, accepted or not, in Unix seconds; 0 if it never has. A server pushes only when the rules change, so a quiet server is not a fault by itself.",
		func(s XDSState) float64 {
			if s.LastPush.IsZero() {
				return 0
			}
			return float64(s.LastPush.UnixNano()) / 1e9
		}},
	{"xds_overlay_unmatched_entries", "Entries of --xds-overlay that match nothing in the rules in use: the push was applied without them (docs/xds.md).",
		func(s XDSState) float64 { return float64(s.OverlayUnmatched) }},
}

// SourceState is one rule source's state, when there are several
// (--xds-source).
type SourceState struct {
	Name string
	// XDS is the state of an xDS source; nil for rule files.
	XDS *XDSState
	// Refused counts the source's domains that another source holds.
	Refused int
}

// Sources registers the metrics of several rule sources, read from state
// at scrape time: the xDS gauges of XDS, one series per xDS source
// labelled source, and ratelimit_sidecar_rule_source_refused_domains for
// every source. With one source XDS registers the same gauges unlabelled.
func (m *Metrics) Sources(state func() []SourceState) {
	m.Registry.MustRegister(&sourcesCollector{state: state})
}

var refusedDomains = prometheus.NewDesc(ns+"_rule_source_refused_domains",
	"Domains of the rule source refused because another rule source holds them (--xds-source): the holder's rules decide them; the log and /debug/config say which.",
	[]string{"source"}, nil)

type sourcesCollector struct{ state func() []SourceState }

func (c *sourcesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range xdsGauges {
		ch <- d.desc()
	}
	ch <- refusedDomains
}

func (c *sourcesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.state() {
		ch <- prometheus.MustNewConstMetric(refusedDomains, prometheus.GaugeValue, float64(s.Refused), s.Name)
		if s.XDS == nil {
			continue
		}
		for _, d := range xdsGauges {
			ch <- prometheus.MustNewConstMetric(d.desc(), prometheus.GaugeValue, d.value(*s.XDS), s.Name)
		}
	}
}

func (d xdsGauge) desc() *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+d.name, d.help, []string{"source"}, nil)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
