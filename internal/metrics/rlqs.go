package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RLQS records the Rate Limit Quota Service: its streams and buckets,
// what Envoy reports it decided by itself, and the assignments sent. It
// fits rlqs.Metrics. The domain label is a domain of the rules in use,
// or "" for one they do not define. Its metrics exist only when RLQS is
// served.
type RLQS struct {
	streams  prometheus.Gauge
	buckets  prometheus.Gauge
	requests *prometheus.CounterVec
	assigned *prometheus.CounterVec
	granted  *prometheus.CounterVec
	pushes   prometheus.Counter
	returned *prometheus.CounterVec
}

// RLQS registers the RLQS metrics. Call it once.
func (m *Metrics) RLQS() *RLQS {
	r := &RLQS{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "rlqs_streams",
			Help: "Open RLQS streams (one per Envoy that uses the rate_limit_quota filter)."}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "rlqs_buckets",
			Help: "Buckets subscribed on the open RLQS streams."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_requests_total",
			Help: "Requests Envoy decided by itself and reported over RLQS, by result: allowed or denied."}, []string{"domain", "result"}),
		assigned: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_assignments_total",
			Help: "Actions sent to Envoy, by action (token_bucket, allow_all, deny_all, abandon) and reason (grant, local, dry, window_ending, store_error, no_rule, unsupported, refused, idle)."}, []string{"domain", "action", "reason"}),
		granted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_granted_hits_total",
			Help: "Hits assigned to Envoy in token buckets, by store: shared (taken from Redis) or local (failure mode local)."}, []string{"domain", "store"}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_pushes_total",
			Help: "Messages of new assignments sent between reports: when a busy bucket's grant ends or runs out before the next report, its window turns, or a limit that ran dry can grant again."}),
		returned: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rlqs_returned_hits_total",
			Help: "Hits of grants given back to Redis unspent: replaced grants, once a report shows what they still held, bucket grants that ended, and grants too late to assign."}, []string{"domain"}),
	}
	m.Registry.MustRegister(r.streams, r.buckets, r.requests, r.assigned, r.granted, r.pushes, r.returned)
	return r
}

// Streams adds delta to the open streams.
func (r *RLQS) Streams(delta int) { r.streams.Add(float64(delta)) }

// Buckets adds delta to the subscribed buckets.
func (r *RLQS) Buckets(delta int) { r.buckets.Add(float64(delta)) }

// Usage counts what a report says Envoy decided.
func (r *RLQS) Usage(domain string, allowed, denied uint64) {
	if allowed > 0 {
		r.requests.WithLabelValues(domain, "allowed").Add(float64(allowed))
	}
	if denied > 0 {
		r.requests.WithLabelValues(domain, "denied").Add(float64(denied))
	}
}

// Assigned counts an action sent.
func (r *RLQS) Assigned(domain, action, reason string) {
	r.assigned.WithLabelValues(domain, action, reason).Inc()
}

// Granted counts hits assigned.
func (r *RLQS) Granted(domain string, hits uint64, local bool) {
	store := "shared"
	if local {
		store = "local"
	}
	r.granted.WithLabelValues(domain, store).Add(float64(hits))
}

// Pushed counts a message sent between reports.
func (r *RLQS) Pushed() { r.pushes.Inc() }

// Returned counts hits given back to Redis.
func (r *RLQS) Returned(domain string, hits uint64) {
	r.returned.WithLabelValues(domain).Add(float64(hits))
}
