package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// openStream opens a stream to addr and returns it with a function that
// reports one bucket on it and waits for the answer.
func openStream(t *testing.T, ctx context.Context, conn *grpc.ClientConn) (rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, func(id map[string]string)) {
	t.Helper()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := true
	return stream, func(id map[string]string) {
		t.Helper()
		msg := &rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1},
		}}
		if first {
			msg.Domain, first = "rlqs", false
		}
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
}

// closeStream ends stream and waits for the server's handler to return,
// which is when the stream's buckets are let go.
// endFreed ends the open streams and checks that their buckets and their
// heap, down to base, are given back.
func endFreed(t *testing.T, s *server, open []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, base uint64) {
	t.Helper()
	for _, stream := range open {
		closeStream(t, stream)
	}
	if n := s.m.BucketsHeld(); n != 0 {
		t.Errorf("%d buckets held after the streams ended", n)
	}
	if after := heap(); after > base+8<<20 {
		t.Errorf("heap %d MiB after the streams ended, was %d MiB before", after>>20, base>>20)
	}
}

func closeStream(t *testing.T, stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	t.Helper()
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
}

// TestLargeBucketIDsBounded: bucket ids of 256 KiB (the most 32 entries
// of 4 KiB keys and values make under the default request bounds; here
// one value of 256 KiB, so that a rule serves them and they are kept: a
// bucket no rule serves is not kept at all), on several
// streams, hold the server to its process-wide byte bound (the default,
// 32 MiB), well under the pod's 128 MiB; the buckets past it are
// refused and counted; and the memory is given back when the streams
// end. Before the bound, the 240 buckets (60 MiB sent) were all kept,
// each id twice: about 120 MiB held.
func TestLargeBucketIDsBounded(t *testing.T) {
	s := startFar(t, limits.RequestLimits{MaxValueBytes: 256 << 10}, rlqs.Options{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const streams, perStream = 4, 60
	base := heap()
	var open []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := range streams {
		stream, report := openStream(t, ctx, conn)
		open = append(open, stream)
		for j := range perStream {
			pre := fmt.Sprintf("%d.%d.", i, j)
			report(map[string]string{"route": pre + strings.Repeat("v", 256<<10-len(pre))})
		}
	}
	held := heap() - min(base, heap())
	t.Logf("heap held by %d buckets of 256 KiB: %d MiB", streams*perStream, held>>20)
	if held > 48<<20 {
		t.Errorf("heap held %d MiB, want under 48 MiB", held>>20)
	}
	refused := s.m.Count("deny_all/refused")
	if refused == 0 || s.m.BucketsHeld()+refused != streams*perStream {
		t.Errorf("%d buckets held and %d refused, want some refused and %d in all", s.m.BucketsHeld(), refused, streams*perStream)
	}
	endFreed(t, s, open, base)
}

// TestBucketsBoundedAcrossStreams: many streams of small buckets, each
// stream within MaxBuckets, are held together to MaxTotalBuckets; a
// bucket past it is answered by the domain's failure mode and counted,
// and a stream's end makes room again.
func TestBucketsBoundedAcrossStreams(t *testing.T) {
	s := startServer(t, perRouteRules, limits.EngineOptions{}, rlqs.Options{MaxBuckets: 500, MaxTotalBuckets: 1000})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var open []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := range 5 {
		stream, report := openStream(t, ctx, conn)
		open = append(open, stream)
		for j := range 400 {
			report(map[string]string{"route": fmt.Sprintf("%d-%d", i, j)})
		}
	}
	if n, r := s.m.BucketsHeld(), s.m.Count("deny_all/refused"); n != 1000 || r != 1000 {
		t.Fatalf("%d buckets held, %d refused; want 1000 and 1000", n, r)
	}
	closeStream(t, open[0])
	stream, report := openStream(t, ctx, conn)
	defer closeStream(t, stream)
	report(map[string]string{"route": "new"})
	if n, r := s.m.BucketsHeld(), s.m.Count("deny_all/refused"); n != 601 || r != 1000 {
		t.Errorf("after a stream ended: %d buckets held, %d refused; want 601 and 1000", n, r)
	}
	for _, st := range open[1:] {
		closeStream(t, st)
	}
}

// farStore grants every lease in full until its window ends, and keeps
// nothing: it stands for Redis, which holds the counters' keys outside
// the process, so that the heap measured is the server's own.
type farStore struct{ now func() time.Time }

func (f farStore) Apply(_ context.Context, b *limits.Batch) error {
	b.Outcomes = make([]limits.Outcome, len(b.Checks))
	for i, c := range b.Checks {
		w := c.Limit.Window()
		left := w - time.Duration(f.now().UnixNano())%w
		b.Outcomes[i] = limits.Outcome{Remaining: c.Limit.Requests, Reset: left, Granted: c.Extra, GrantFor: left}
	}
	b.Admitted = true
	return nil
}

// startFar serves perRouteRules from a farStore, under the request
// bounds l.
func startFar(t *testing.T, l limits.RequestLimits, o rlqs.Options) *server {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(perRouteRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{clk: storetest.NewClock(storetest.Epoch.Add(time.Second)), m: &rlqstest.Metrics{}}
	st := farStore{now: s.clk.Now}
	engine := limits.NewEngine(rs, st, limits.EngineOptions{Limits: l})
	o.Now, o.Metrics, o.AfterFunc = s.clk.Now, s.m, s.clk.AfterFunc
	s.addr = rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, engine, st, zaptest.NewLogger(t), o) })
	return s
}

// TestManyStreamsOfSmallBuckets: issue 25's second shape, 50 streams
// each subscribing many one-entry buckets in one message, scaled from
// 10,000 buckets a stream to 2,000 so that it runs in a second: the
// process-wide bound (50,000, the default) holds half of the 100,000,
// the rest are refused, the heap they hold stays well under the pod's
// 128 MiB, and it is given back when the streams end. Before the bound
// the 500,000 buckets of the unscaled shape held 318 MB.
func TestManyStreamsOfSmallBuckets(t *testing.T) {
	const streams, perStream = 50, 2000
	s := startFar(t, limits.RequestLimits{}, rlqs.Options{})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := heap()
	var open []rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	for i := range streams {
		stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, stream)
		msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs"}
		for j := range perStream {
			msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": fmt.Sprintf("tenant-%08d-%d", i, j)}}, NumRequestsAllowed: 1})
		}
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	held := heap() - min(base, heap())
	t.Logf("heap held by %d streams of %d buckets: %d MiB; %d buckets held, %d refused", streams, perStream, held>>20, s.m.BucketsHeld(), s.m.Count("deny_all/refused"))
	if held > 96<<20 {
		t.Errorf("heap held %d MiB, want under 96 MiB", held>>20)
	}
	if n, r := s.m.BucketsHeld(), s.m.Count("deny_all/refused"); n != 50_000 || r != streams*perStream-50_000 {
		t.Errorf("%d buckets held and %d refused, want 50000 and %d", n, r, streams*perStream-50_000)
	}
	endFreed(t, s, open, base)
}
