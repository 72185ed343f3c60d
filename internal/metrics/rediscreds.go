package metrics

import "github.com/prometheus/client_golang/prometheus"

// RedisCredentials registers the counts of the Redis credentials that
// change while the sidecar runs (credential files, AWS IAM tokens), read
// at scrape time: changes, the new values taken; failures, the files
// that could not be read or were empty and the tokens that could not be
// signed.
func (m *Metrics) RedisCredentials(changes, failures func() uint64) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "redis_credential_changes_total",
			Help: "New Redis credentials taken: a credential file's new content, or a newly signed AWS IAM auth token."},
			func() float64 { return float64(changes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "redis_credential_failures_total",
			Help: "Redis credentials not renewed: a credential file unreadable or empty (its last value stays), or an AWS IAM auth token not signed."},
			func() float64 { return float64(failures()) }))
}
