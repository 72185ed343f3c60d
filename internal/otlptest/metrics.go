package otlptest

import (
	"context"
	"fmt"
	"sync"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// Metric is a metric a receiver was sent, with its resource's attributes.
type Metric struct {
	*metricspb.Metric
	Resource map[string]string
	Scope    string
}

// metricStore keeps the metrics a receiver was sent.
type metricStore struct {
	mu      sync.Mutex
	metrics []Metric
	exports int
}

// Metrics returns the metrics received so far, oldest first: each export
// sends each metric again, with its running totals.
func (r *Receiver) Metrics() []Metric {
	r.ms.mu.Lock()
	defer r.ms.mu.Unlock()
	return append([]Metric(nil), r.ms.metrics...)
}

// Exports returns how many metric exports r has received.
func (r *Receiver) Exports() int {
	r.ms.mu.Lock()
	defer r.ms.mu.Unlock()
	return r.ms.exports
}

// WaitMetrics waits up to timeout until done, called with the metrics
// received so far after each export, is true; it reports whether it was.
func (r *Receiver) WaitMetrics(timeout time.Duration, done func([]Metric) bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		if done(r.Metrics()) {
			return true
		}
		select {
		case <-r.added:
		case <-t.C:
			return done(r.Metrics())
		}
	}
}

// Sum returns the value of the last data point of the sum name whose
// attributes are exactly attrs, among ms.
func Sum(ms []Metric, name string, attrs map[string]string) (float64, bool) {
	var v float64
	var found bool
	for _, m := range ms {
		if m.GetName() != name || m.GetSum() == nil {
			continue
		}
		for _, dp := range m.GetSum().GetDataPoints() {
			if sameAttrs(dp.GetAttributes(), attrs) {
				v, found = dp.GetAsDouble(), true
				if _, ok := dp.GetValue().(*metricspb.NumberDataPoint_AsInt); ok {
					v = float64(dp.GetAsInt())
				}
			}
		}
	}
	return v, found
}

// HistogramCount returns the count of the last data point of the
// histogram name, among ms.
func HistogramCount(ms []Metric, name string) (uint64, bool) {
	var n uint64
	var found bool
	for _, m := range ms {
		if m.GetName() != name || m.GetHistogram() == nil {
			continue
		}
		for _, dp := range m.GetHistogram().GetDataPoints() {
			n, found = dp.GetCount(), true
		}
	}
	return n, found
}

func sameAttrs(kvs []*commonpb.KeyValue, want map[string]string) bool {
	got := attrs(kvs)
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != v {
			return false
		}
	}
	return true
}

func (r *Receiver) addMetrics(req *colmetricspb.ExportMetricsServiceRequest) {
	r.ms.mu.Lock()
	r.ms.exports++
	for _, rm := range req.GetResourceMetrics() {
		res := map[string]string{}
		for k, v := range attrs(rm.GetResource().GetAttributes()) {
			res[k] = fmt.Sprint(v)
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				r.ms.metrics = append(r.ms.metrics, Metric{Metric: m, Resource: res, Scope: sm.GetScope().GetName()})
			}
		}
	}
	r.ms.mu.Unlock()
	select {
	case r.added <- struct{}{}:
	default:
	}
}

type metricsService struct {
	colmetricspb.UnimplementedMetricsServiceServer
	r *Receiver
}

func (s *metricsService) Export(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	s.r.addMetrics(req)
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}
