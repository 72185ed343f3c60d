package metrics

import "github.com/prometheus/client_golang/prometheus"

// PushErrors returns the counter of failed pushes of sink (statsd or
// otlp) to its receiver.
func (m *Metrics) PushErrors(sink string) prometheus.Counter {
	return m.pushErrors.WithLabelValues(sink)
}
