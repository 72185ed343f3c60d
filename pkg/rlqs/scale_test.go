package rlqs_test

import (
	"context"
	"fmt"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// BenchmarkReportManyBuckets: one report of n subscriptions, each a new
// grant, as an Envoy whose stream just opened sends them.
func BenchmarkReportManyBuckets(b *testing.B) {
	for _, n := range []int{100, 1000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := startServer(b, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1000000, lease: 10}
`, limits.EngineOptions{}, rlqs.Options{})
			conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			for i := 0; b.Loop(); i++ {
				stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs"}
				for j := range n {
					msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
						BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": fmt.Sprint(i, "-", j)}}, NumRequestsDenied: 1})
				}
				if err := stream.Send(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := stream.Recv(); err != nil {
					b.Fatal(err)
				}
				_ = stream.CloseSend()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/bucket")
		})
	}
}
