package rejectlog_test

import (
	"context"
	"io"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// BenchmarkRejectedRequest decides a request that a ban rejects through
// the RLS server's message path, with the rejection log as the sidecar
// builds it (Settings.New, in a sampled JSON log at info): off, at its
// default level debug (a level check), and at info under a flood, where
// the rate bound leaves almost every line out. Compare with envoy's BenchmarkShouldRateLimit/rejected.
func BenchmarkRejectedRequest(b *testing.B) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(
		"domain: bench\ndescriptors:\n  - key: banned\n    rate_limit: {unit: second, requests_per_unit: 0}\n")}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "banned", Value: "mallory"}}},
	}}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel)
	log := zap.New(rejectlog.Unsampled(zapcore.NewSamplerWithOptions(core, time.Second, 10, 100), core))
	for _, bc := range []struct {
		name  string
		level string
	}{{"off", "off"}, {"debug", "debug"}, {"info_flood", "info"}} {
		b.Run(bc.name, func(b *testing.B) {
			engine := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
			opts := envoy.Options{}
			if rej := (rejectlog.Settings{Level: bc.level, Rate: 10, Values: "hash"}).New(log, "memory", time.Now); rej != nil {
				opts.Rejections = rej
			}
			srv := envoy.NewServer(engine, zap.NewNop(), opts)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := srv.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					b.Fatalf("%v, %v", resp.GetOverallCode(), err)
				}
			}
		})
	}
}
