package rlqs_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// TestStreamBounds: what one stream makes the server hold is bounded. A
// stream may subscribe to at most MaxBuckets buckets, and a bucket id is
// held to the RLS path's bounds on entries and bytes; past either the
// stream ends with InvalidArgument naming the bucket.
func TestStreamBounds(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "r.yaml", Data: []byte(fleetRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{
		Limits: limits.RequestLimits{MaxDescriptors: 1, MaxEntries: 2, MaxValueBytes: 16, MaxHits: 10},
	})
	g := grpc.NewServer()
	rlqs.NewServer(engine, memory.New(memory.Options{}), zaptest.NewLogger(t), rlqs.Options{MaxBuckets: 3}).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	tests := []struct {
		name string
		ids  []map[string]string
		want string // in the error; empty: every report answered
	}{
		{"within the bounds", []map[string]string{{"route": "a"}, {"route": "b"}, {"route": "c"}, {"route": "a"}}, ""},
		{"one bucket too many", []map[string]string{{"route": "a"}, {"route": "b"}, {"route": "c"}, {"route": "d"}}, "more than 3 buckets on one stream"},
		{"a value too long", []map[string]string{{"route": strings.Repeat("x", 17)}}, "bucket_id, matched as a descriptor: descriptors[0].entries[0].value: longer than 16 bytes"},
		{"too many entries", []map[string]string{{"a": "1", "b": "2", "c": "3"}}, "3 entries, more than the maximum 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got error
			for i, id := range tt.ids {
				msg := &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
					{BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1},
				}}
				if i == 0 {
					msg.Domain = "rlqs"
				}
				if err := stream.Send(msg); err != nil {
					got = err
					break
				}
				if _, err := stream.Recv(); err != nil {
					got = err
					break
				}
			}
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("stream failed: %v", got)
			case tt.want == "":
				return
			case status.Code(got) != codes.InvalidArgument || !strings.Contains(status.Convert(got).Message(), tt.want):
				t.Fatalf("stream ended with %v; want InvalidArgument with %q", got, tt.want)
			}
		})
	}
}
