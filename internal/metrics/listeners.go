package metrics

import "github.com/prometheus/client_golang/prometheus"

// CappedListener is a listener that caps its open connections
// (internal/bounds.Listener).
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

// MessageBounds are the bounds on gRPC messages on their way in
// (internal/bounds.Messages).
type MessageBounds interface {
	// Held returns the bytes counted for messages arriving.
	Held() int64
	// Refused returns how many messages were refused at their prefix.
	Refused() uint64
	// Stalled returns how many connections were closed because a
	// message did not arrive whole in time.
	Stalled() uint64
}

// Messages registers the metrics of the gRPC server's message bounds,
// read at scrape time.
func (m *Metrics) Messages(b MessageBounds) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "grpc_message_bytes_held",
			Help: "Bytes counted for gRPC request messages over 64 KiB while they arrive, against the connection's and the process's bounds."},
			func() float64 { return float64(b.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "grpc_messages_refused_total",
			Help: "gRPC request messages refused at their prefix, before they were read: over their method's bound, or past the bytes the connection or the process may hold."},
			func() float64 { return float64(b.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "grpc_connections_stalled_total",
			Help: "gRPC connections closed because a request message did not arrive whole within 10s of its prefix."},
			func() float64 { return float64(b.Stalled()) }))
}
