package rlqs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// TestStreamBounds: what one stream makes the server hold is bounded. A
// stream may subscribe to at most MaxBuckets buckets, and a bucket id is
// held to the RLS path's bounds on entries and bytes. A bucket past
// either is refused: answered by the domain's failure mode (here
// DENY_ALL) and not kept, while the stream goes on serving the others.
// A stream without a domain ends with InvalidArgument. (The ids are
// served from a limit: a bucket that is not is never kept, so it takes no
// room.)
func TestStreamBounds(t *testing.T) {
	s := startServer(t, perRouteRules, limits.EngineOptions{
		Limits: limits.RequestLimits{MaxDescriptors: 1, MaxEntries: 2, MaxValueBytes: 16, MaxHits: 10},
	}, rlqs.Options{MaxBuckets: 3})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	tests := []struct {
		name    string
		ids     []map[string]string
		refused int // reports refused, of the ids and the first one again
	}{
		{"within the bounds", []map[string]string{{"route": "a"}, {"route": "b"}, {"route": "c"}, {"route": "a"}}, 0},
		{"one bucket too many", []map[string]string{{"route": "a"}, {"route": "b"}, {"route": "c"}, {"route": "d"}}, 1},
		{"a value too long", []map[string]string{{"route": strings.Repeat("x", 17)}}, 2},
		{"too many entries", []map[string]string{{"a": "1", "b": "2", "c": "3"}}, 2},
		{"an empty bucket id", []map[string]string{{}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.m.Count("deny_all/refused")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var last *rlqspb.RateLimitQuotaResponse
			// Each bucket, then the first one again: the stream goes on.
			for i, id := range append(tt.ids, tt.ids[0]) {
				msg := &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
					{BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1},
				}}
				if i == 0 {
					msg.Domain = "rlqs"
				}
				if err := stream.Send(msg); err != nil {
					t.Fatalf("report %d: %v", i, err)
				}
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("report %d: %v", i, err)
				}
				if i == len(tt.ids)-1 {
					last = resp
				}
			}
			got := s.m.Count("deny_all/refused") - before
			if got != tt.refused {
				t.Errorf("%d reports refused, want %d", got, tt.refused)
			}
			if tt.refused > 0 {
				a := last.GetBucketAction()
				if len(a) != 1 || a[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
					t.Errorf("refused bucket answered %v, want DENY_ALL", a)
				}
			}
		})
	}

	t.Run("domain changed", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Envoy names the domain in every report: the same again is fine.
		for _, d := range []string{"rlqs", "rlqs", "other"} {
			_ = stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: d, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": "a"}}, NumRequestsAllowed: 1},
			}})
			_, err = stream.Recv()
			if d == "rlqs" && err != nil {
				t.Fatalf("a report naming the stream's domain again: %v", err)
			}
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), `domain: "other", but the stream serves "rlqs"`) {
			t.Fatalf("a report naming another domain: %v; want InvalidArgument naming domain", err)
		}
	})

	t.Run("no domain", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": "a"}}},
		}})
		_, err = stream.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "domain: must be set") {
			t.Fatalf("stream without a domain: %v; want InvalidArgument naming domain", err)
		}
	})
}

// perRouteRules limit every route on its own counter, so every bucket
// keyed by route is served from a limit and kept.
const perRouteRules = `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`
