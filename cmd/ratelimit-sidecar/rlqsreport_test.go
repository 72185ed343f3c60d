package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRLQSLargeReports: Envoy sends every bucket it holds in one report,
// so an RLQS stream takes messages up to 16 MiB, while every other
// method keeps its 1 MiB (TestMessageAndHeaderSize). A report of 50,000
// buckets of tenant-length ids (2.4 MB) is answered, bucket by bucket; a
// report of more than 50,000 buckets is refused before it is decoded,
// ending the stream. Before, any report over 1 MiB ended the stream with
// RESOURCE_EXHAUSTED: an Envoy of about 45,000 short ids (17,000
// tenant-length ones) lost its stream at every report.
func TestRLQSLargeReports(t *testing.T) {
	srv := redistest.StartServer(t)
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr}})
	conn := grpcConn(t, s.grpcAddr, nil)
	report := func(n int) (*rlqspb.RateLimitQuotaResponse, int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx, grpc.MaxCallSendMsgSize(32<<20), grpc.MaxCallRecvMsgSize(32<<20))
		if err != nil {
			t.Fatal(err)
		}
		msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge"}
		for i := range n {
			// Buckets no rule serves: answered without a Redis call each.
			id := fmt.Sprintf("tenant-%08d-", i)
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"path": id + strings.Repeat("t", 32-len(id))}}, NumRequestsAllowed: 1})
		}
		// io.EOF: the server ended the stream while the report was still
		// on its way (it refuses a report of too many buckets as they
		// arrive); Recv has the status.
		if err := stream.Send(msg); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		_ = stream.CloseSend()
		return resp, proto.Size(msg), err
	}

	start := time.Now()
	resp, size, err := report(50_000)
	t.Logf("a report of 50,000 buckets (%d bytes) answered in %v", size, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("a report of 50,000 buckets (%d bytes): %v; want an answer", size, err)
	}
	if n := len(resp.GetBucketAction()); n != 50_000 {
		t.Errorf("%d actions for 50,000 buckets", n)
	}

	_, size, err = report(50_001)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "bucket_quota_usages: more than 50000 buckets in one report") {
		t.Errorf("a report of 50,001 buckets (%d bytes): %v; want it refused for its buckets", size, err)
	}
}

// TestRLQSReportIDsBounded: a report with a bucket id of more than four
// times --max-entries is refused before it is decoded, ending the
// stream; with --max-entries raised, the same id is decoded and its
// bucket answered by the failure mode. Issue 37 sent one id of 2,000,000
// entries (16 MB), which decoded to 268 MB and was echoed back whole.
func TestRLQSReportIDsBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	id := map[string]string{}
	for i := range 200 {
		id[fmt.Sprintf("k%03d", i)] = "v"
	}
	report := func(s *sidecar) (*rlqspb.RateLimitQuotaResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(grpcConn(t, s.grpcAddr, nil)).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1}}}); err != nil {
			t.Fatal(err)
		}
		defer stream.CloseSend() //nolint:errcheck // the stream is done
		return stream.Recv()
	}
	s := startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr}})
	if _, err := report(s); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "more than 128 entries") {
		t.Errorf("an id of 200 entries at --max-entries 32: %v; want it refused before decoding", err)
	}
	s = startSidecar(t, sidecarOpts{rules: fmt.Sprintf(rlqsRules, ""), args: []string{"--redis-url", "redis://" + srv.Addr, "--max-entries", "64"}})
	resp, err := report(s)
	if err != nil || len(resp.GetBucketAction()) != 1 {
		t.Errorf("an id of 200 entries at --max-entries 64: %v, %v; want its bucket answered", resp, err)
	}
}
