package envoy_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// rejected records what the server tells its Rejections, copied, since
// Rejected must not keep the request or the decision.
type rejected struct {
	mu    sync.Mutex
	calls []string // per call: the domain and each descriptor's code
}

func (r *rejected) Rejected(req *limits.Request, d *limits.Decision) {
	s := req.Domain
	for _, st := range d.Statuses {
		s += " " + st.Code.String()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *rejected) took() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// TestRejections: the server tells Options.Rejections of every request it
// answers OVER_LIMIT, on the gRPC path and on the message path (/json),
// and of no other.
func TestRejections(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	engine := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
	rec := &rejected{}
	srv := envoy.NewServer(engine, zap.NewNop(), envoy.Options{Rejections: rec})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	srv.Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)

	// The user's token bucket admits 2 at once.
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("generic_key", "global"),
		desc("tenant", "acme", "user", "alice"),
	}}
	ctx := context.Background()
	for i, viaGRPC := range []bool{true, false, true, false} {
		var resp *rlsv3.RateLimitResponse
		if viaGRPC {
			resp, err = client.ShouldRateLimit(ctx, req)
		} else {
			resp, err = srv.ShouldRateLimit(ctx, req)
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		wantCalls := max(0, i-1)
		if got := rec.took(); len(got) != wantCalls {
			t.Fatalf("request %d (%v): %d calls of Rejected, want %d: %q", i, resp.GetOverallCode(), len(got), wantCalls, got)
		}
	}
	want := "edge OK OVER_LIMIT"
	for i, got := range rec.took() {
		if got != want {
			t.Errorf("call %d: %q, want %q", i, got, want)
		}
	}
}
