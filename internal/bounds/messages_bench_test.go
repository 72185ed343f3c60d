package bounds

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck // RUSAGE_SELF does not fail
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRLSThroughBounds decides RLS requests over gRPC on loopback,
// 8 calls in flight, with a deadline as Envoy sends: bounds=off is the
// server as it was (grpc-go's dynamic windows, no Messages), bounds=on
// as cmd builds it now. cpu-ns/op is the process's CPU (server and
// client) per decision, the figure to compare; ns/op depends on what
// else the machine runs. Compare with benchstat -col /bounds.
func BenchmarkRLSThroughBounds(b *testing.B) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(
		"domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
	}}
	for _, on := range []bool{false, true} {
		name := "bounds=off"
		if on {
			name = "bounds=on"
		}
		b.Run(name, func(b *testing.B) {
			opts := []grpc.ServerOption{
				grpc.MaxRecvMsgSize(RLQSMaxBytes),
				grpc.ForceServerCodecV2(envoy.Codec(NewCodec(IDBounds{}))),
			}
			if on {
				m := &Messages{Default: MaxBytes, ConnBytes: ConnBytes, TotalBytes: TotalBytes, Timeout: MessageTimeout,
					Work: map[string]bool{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": true}}
				opts = append(opts, grpc.Creds(m.Creds(insecure.NewCredentials())),
					grpc.StaticStreamWindowSize(Window), grpc.StaticConnWindowSize(1<<20))
			}
			g := grpc.NewServer(opts...)
			engine := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
			envoy.NewServer(engine, zap.NewNop(), envoy.Options{}).Register(g)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				g.Serve(l) //nolint:errcheck // ends at Stop
			}()
			defer func() {
				g.Stop()
				<-done
			}()
			conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			b.SetParallelism(4) // 8 in flight on 2 CPUs
			b.ReportAllocs()
			start := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := c.ShouldRateLimit(ctx, req)
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
