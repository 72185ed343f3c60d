package envoy_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

const oneRule = `
domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// serveOpts serves oneRule with the server options o, and returns a gRPC
// client and the /json handler.
func serveOpts(t *testing.T, o envoy.Options) (rlsv3.RateLimitServiceClient, http.Handler) {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(oneRule)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	engine := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	srv := envoy.NewServer(engine, zap.NewNop(), o)
	srv.Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), srv.JSONHandler()
}

func kRequest(value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("k", value)}}
}

// TestShadowOption: with Shadow, a request over its limit is answered OK
// overall, over gRPC and /json, while its descriptor still says
// OVER_LIMIT; without, it is OVER_LIMIT.
func TestShadowOption(t *testing.T) {
	tests := []struct {
		name     string
		shadow   bool
		wantCode rlsv3.RateLimitResponse_Code
		wantHTTP int
	}{
		{name: "shadow", shadow: true, wantCode: ok, wantHTTP: http.StatusOK},
		{name: "enforced", shadow: false, wantCode: over, wantHTTP: http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, jsonHandler := serveOpts(t, envoy.Options{Shadow: tt.shadow})
			ctx := context.Background()
			if _, err := c.ShouldRateLimit(ctx, kRequest("a")); err != nil {
				t.Fatal(err)
			}
			resp, err := c.ShouldRateLimit(ctx, kRequest("a"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode != tt.wantCode || resp.Statuses[0].Code != over {
				t.Errorf("gRPC: overall %v, descriptor %v; want %v, OVER_LIMIT", resp.OverallCode, resp.Statuses[0].Code, tt.wantCode)
			}
			rec := postJSON(jsonHandler, http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`)
			if rec.Code != tt.wantHTTP || !strings.Contains(rec.Body.String(), `"code":"OVER_LIMIT"`) {
				t.Errorf("/json: %d %s; want %d with the descriptor OVER_LIMIT", rec.Code, rec.Body, tt.wantHTTP)
			}
		})
	}
}

// TestHeaderNamesOption: HeaderNames renames the draft 03 headers, over
// gRPC and /json; the values and Retry-After stay.
func TestHeaderNamesOption(t *testing.T) {
	names := envoy.HeaderNames{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"}
	c, jsonHandler := serveOpts(t, envoy.Options{Headers: envoy.HeadersDraft03, HeaderNames: names})
	ctx := context.Background()
	resp, err := c.ShouldRateLimit(ctx, kRequest("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := headerList(resp), []string{"X-Limit: 1", "X-Left: 0", "X-Reset: 60"}; !cmp.Equal(got, want) {
		t.Errorf("gRPC headers %q, want %q", got, want)
	}
	resp, err = c.ShouldRateLimit(ctx, kRequest("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := headerList(resp), []string{"X-Limit: 1", "X-Left: 0", "X-Reset: 60", "Retry-After: 60"}; !cmp.Equal(got, want) {
		t.Errorf("gRPC headers over the limit %q, want %q", got, want)
	}
	rec := postJSON(jsonHandler, http.MethodPost, `{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":"b"}]}]}`)
	if rec.Header().Get("X-Limit") != "1" || rec.Header().Get("X-Left") != "0" || rec.Header().Get("RateLimit-Limit") != "" {
		t.Errorf("/json headers %v", rec.Header())
	}
}

func headerList(resp *rlsv3.RateLimitResponse) []string {
	var out []string
	for _, h := range resp.ResponseHeadersToAdd {
		out = append(out, h.Key+": "+h.Value)
	}
	return out
}

// TestDynamicMetadataOption: DynamicMetadata describes the request in the
// response's dynamic_metadata as envoyproxy/ratelimit does: its domain,
// each descriptor's entries as "key=value", its override limit and
// hits_addend, and the request's hits_addend when not 0.
func TestDynamicMetadataOption(t *testing.T) {
	c, _ := serveOpts(t, envoy.Options{DynamicMetadata: true})
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("k", "a"),
		{
			Entries:    []*rlscommon.RateLimitDescriptor_Entry{{Key: "k", Value: "b"}, {Key: "x", Value: "y"}},
			Limit:      &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_HOUR},
			HitsAddend: wrapperspb.UInt64(2),
		},
	}}
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := structpb.NewStruct(map[string]any{
		"domain":     "edge",
		"hitsAddend": 3,
		"descriptors": []any{
			map[string]any{"entries": []any{"k=a"}},
			map[string]any{"entries": []any{"k=b", "x=y"}, "limit": "requests_per_unit:10 unit:HOUR", "hitsAddend": 2},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, resp.DynamicMetadata, protocmp.Transform()); diff != "" {
		t.Errorf("dynamic_metadata (-want +got):\n%s", diff)
	}
	// Off by default.
	c, _ = serveOpts(t, envoy.Options{})
	if resp, err = c.ShouldRateLimit(context.Background(), req); err != nil || resp.DynamicMetadata != nil {
		t.Errorf("without the option: dynamic_metadata %v, %v", resp.GetDynamicMetadata(), err)
	}
}
