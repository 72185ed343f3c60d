package metrics

import "github.com/prometheus/client_golang/prometheus"

// CappedListener is a listener that caps its open connections
// (internal/listen.Listener).
type CappedListener interface {
	// Open returns how many connections are open.
	Open() int
	// Reclaimed returns how many connections were closed to make room.
	Reclaimed() uint64
	// Refused returns how many new connections were closed because
	// every other was working.
	Refused() uint64
}

// Listeners registers the connection metrics of the capped listeners,
// by name (grpc, http, admin, ...), read at scrape time. A listener
// whose reclaimed count grows is at its cap: either it is too low for
// the clients it serves, or a client is holding connections open.
func (m *Metrics) Listeners(ls map[string]CappedListener) {
	for name, l := range ls {
		labels := prometheus.Labels{"listener": name}
		m.Registry.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "connections_open", ConstLabels: labels,
				Help: "Connections open on a capped listener (--grpc-max-conns, --http-max-conns)."},
				func() float64 { return float64(l.Open()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "connections_reclaimed_total", ConstLabels: labels,
				Help: "Connections a capped listener closed to make room for a new one: the quietest, not working, of the peer holding the most."},
				func() float64 { return float64(l.Reclaimed()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "connections_refused_total", ConstLabels: labels,
				Help: "New connections a capped listener closed at once because every other was working (a call or request within the working time, or in flight)."},
				func() float64 { return float64(l.Refused()) }))
	}
}
