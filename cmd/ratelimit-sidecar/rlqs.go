package main

import (
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// registerRLQS serves Envoy's Rate Limit Quota Service on g, beside RLS
// and under the same TLS, when the store is shared: quota is taken from
// it, past the deny cache and the leases. A local store cannot grant
// quota, so the service is not served then (Envoy gets Unimplemented).
func registerRLQS(g *grpc.Server, c *settings, engine *limits.Engine, st *sidecarStore, m *metrics.Metrics, log *zap.Logger) {
	if st.shared == nil {
		return
	}
	ret, _ := st.counters.(store.Returner)
	rlqs.NewServer(engine, st.shared, log.Named("rlqs"), rlqs.Options{
		Return:    ret,
		BucketTTL: c.rlqsBucketTTL,
		IdleAfter: c.rlqsIdleAfter,
		Metrics:   m.RLQS(),
	}).Register(g)
}
