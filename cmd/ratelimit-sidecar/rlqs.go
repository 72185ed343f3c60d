package main

import (
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// registerRLQS serves Envoy's Rate Limit Quota Service on g, beside RLS
// and under the same TLS, when the store is shared: quota is taken from
// it, past the deny cache and the leases, and it reports whether it
// does. A local store has no fleet to share quota with, so the service is
// not served then (Envoy gets Unimplemented), which the log says.
func registerRLQS(g *grpc.Server, c *settings, engine *limits.Engine, st *sidecarStore, m *metrics.Metrics, tr *tracing.Provider, log *zap.Logger) bool {
	if st.shared == nil {
		log.Info("rlqs not served: quota is shared through Redis; set --redis-url (or Sentinel or Cluster) to serve Envoy's rate_limit_quota filter")
		return false
	}
	ret, _ := st.counters.(limits.Returner)
	rlqs.NewServer(engine, st.shared, log.Named("rlqs"), rlqs.Options{
		Return:     ret,
		BucketTTL:  c.rlqsBucketTTL,
		IdleAfter:  c.rlqsIdleAfter,
		MaxBuckets: c.rlqsMaxBuckets,
		Margin:     c.rlqsMargin,
		Metrics:    m.RLQS(),
		Tracer:     tr.Tracer("github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"),
	}).Register(g)
	return true
}
