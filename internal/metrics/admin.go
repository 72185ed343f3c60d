package metrics

import "github.com/prometheus/client_golang/prometheus"

// RejectionLog registers the rejection log's metric, read from
// suppressed at scrape time: how many rejections its rate bound left out
// of the log.
func (m *Metrics) RejectionLog(suppressed func() uint64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "rejection_logs_suppressed_total",
		Help: "Requests answered OVER_LIMIT that --log-rejections would have logged but --log-rejections-rate left out."},
		func() float64 { return float64(suppressed()) }))
}

// CounterResets registers the count of counters reset through the admin
// endpoint and returns what adds n to it.
func (m *Metrics) CounterResets() func(n int) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "counter_resets_total",
		Help: "Counters reset through POST /debug/counters/reset (--admin-counter-reset)."})
	m.Registry.MustRegister(c)
	return func(n int) { c.Add(float64(n)) }
}

// RedisClientMessages registers the count of go-redis's own log
// messages, read from messages at scrape time.
func (m *Metrics) RedisClientMessages(messages func() uint64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "redis_client_messages_total",
		Help: "Messages go-redis wrote (a failed dial, say); the log has the first of each kind per outage."},
		func() float64 { return float64(messages()) }))
}
