package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// reportAll sends one report of the buckets route=<prefix>-0 ... on
// stream, one request each, and returns the answer.
func reportAll(t *testing.T, stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, prefix string, n int) *rlqspb.RateLimitQuotaResponse {
	t.Helper()
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs"}
	for j := range n {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": fmt.Sprintf("%s-%d", prefix, j)}}, NumRequestsAllowed: 1})
	}
	if err := stream.Send(msg); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// abandons counts an answer's abandons.
func abandons(resp *rlqspb.RateLimitQuotaResponse) int {
	n := 0
	for _, a := range resp.GetBucketAction() {
		if a.GetAbandonAction() != nil {
			n++
		}
	}
	return n
}

// TestOneClientCannotTakeEveryShare: a client that fills the
// process-wide bound of buckets on one connection does not lock a second
// connection's Envoy out: the Envoy is served within its share (half the
// bound, with two connections), and the first gives back what the Envoy
// took past the bound at its next report. Issue 37: one connection of 5
// streams of 10,000 buckets filled the 50,000, and every new Envoy's
// buckets were refused (DENY_ALL, or no limit at all where the domain
// fails open) for as long as it reported once a minute. Scaled here to a
// bound of 1,000.
func TestOneClientCannotTakeEveryShare(t *testing.T) {
	s := startFar(t, limits.RequestLimits{}, rlqs.Options{MaxBuckets: 500, MaxTotalBuckets: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	attacker := dial()
	var streams []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := range 5 {
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(attacker).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, stream)
		reportAll(t, stream, fmt.Sprintf("a%d", i), 400)
	}
	if n := s.m.BucketsHeld(); n != 1000 {
		t.Fatalf("the attacker holds %d buckets, want the bound, 1000", n)
	}

	envoy, err := rlqspb.NewRateLimitQuotaServiceClient(dial()).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refused := s.m.Count("deny_all/refused")
	reportAll(t, envoy, "e", 300)
	if n, r := s.m.BucketsHeld(), s.m.Count("deny_all/refused")-refused; n != 1300 || r != 0 {
		t.Errorf("an Envoy's 300 buckets, within its share of 500: %d held and %d refused, want 1300 (until the attacker gives back) and 0", n, r)
	}
	// Past its share, the Envoy is refused like anyone.
	reportAll(t, envoy, "f", 300)
	if n, r := s.m.BucketsHeld(), s.m.Count("deny_all/refused")-refused; n != 1500 || r != 100 {
		t.Errorf("300 more of the Envoy's buckets, 200 of them within its share: %d held and %d refused, want 1500 and 100", n, r)
	}
	// The attacker's next reports give back what the Envoy took past
	// the bound, with abandons.
	abandoned := 0
	for i, stream := range streams {
		abandoned += abandons(reportAll(t, stream, fmt.Sprintf("a%d", i), 400))
	}
	if abandoned != 500 || s.m.Count("abandon/share") != 500 {
		t.Errorf("the attacker abandoned %d buckets, want the 500 the Envoy took past the bound", abandoned)
	}
	if n := s.m.BucketsHeld(); n != 1000 {
		t.Errorf("%d buckets held after the attacker's reports, want 1000", n)
	}
	for _, st := range append(streams, envoy) {
		closeStream(t, st)
	}
}
