package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRLQSStuckClientShutdown: an RLQS client that stops reading while
// the sidecar answers its reports (its receive window full, the answers
// queued behind it) does not hold shutdown for --shutdown-timeout: once
// every call's handler has returned (the unary ones by their 2 s
// deadline), what is left is data no client reads, and the sidecar stops
// a second later. Before, the stream's end waited behind the queued
// answers, and the graceful stop for the whole 10 s.
func TestRLQSStuckClientShutdown(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf(rlqsRules, ""))
	logs := &logtest.Buffer{}
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--drain-delay", "0s", "--shutdown-timeout", "30s"}})

	// Fixed windows turn off grpc-go's growing of them: the client reads
	// no more than 64 KiB of answers it does not take.
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Reports of 500 buckets no rule serves, each answered ALLOW_ALL
	// with its 200-byte id: about 115 KB of answer per report, none read.
	const reports, buckets = 8, 500
	sent := make(chan error, 1)
	go func() {
		for r := range reports {
			msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "edge"}
			for j := range buckets {
				id := fmt.Sprintf("%d-%d-", r, j)
				msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId: &rlqspb.BucketId{Bucket: map[string]string{"path": id + strings.Repeat("p", 200-len(id))}}, NumRequestsAllowed: 1})
			}
			if err := stream.Send(msg); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// Two answers are more than the client's window: the rest queue.
	const series = `ratelimit_sidecar_rlqs_assignments_total{action="allow_all",domain="edge",reason="no_rule"}`
	waitFor(t, func() bool { return metricValue(t, s, series) >= 2*buckets })

	start := time.Now()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("shutdown with a client that stopped reading took %v", d.Round(time.Millisecond))
	// About 3 s here (the request timeout and a second's grace); held by
	// the client, it took the whole --shutdown-timeout. Half of it is a
	// bound no busy machine reaches by chance.
	if d > 15*time.Second {
		t.Errorf("shutdown took %v, want well under --shutdown-timeout (30s)", d.Round(time.Millisecond))
	}
	if l := logs.String(); strings.Contains(l, "in-flight requests did not finish in time") {
		t.Errorf("the stuck stream held the graceful stop until --shutdown-timeout")
	}
	cancel()
	<-sent
}
