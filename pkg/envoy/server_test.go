package envoy_test

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rules = `
domain: edge
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: tenant
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 50, name: tenant}
    descriptors:
      - key: user
        rate_limits:
          - {algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 2}
          - {unit: day, requests_per_unit: 1000}
  - key: free
    rate_limit: {unlimited: true}
`

// start serves rules on a loopback port with a clock that stands still at
// storetest.Epoch + 100 ms, and returns a client.
func start(t *testing.T, lim limits.RequestLimits) rlsv3.RateLimitServiceClient {
	t.Helper()
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	return rlsv3.NewRateLimitServiceClient(serve(t, memory.Options{Now: clk.Now}, limits.EngineOptions{Limits: lim}))
}

// serve serves rules, decided on a memory store of mo by an engine of eo,
// on a loopback port and returns a connection to it made with dial.
func serve(t *testing.T, mo memory.Options, eo limits.EngineOptions, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := limits.NewEngine(rs, memory.New(mo), eo)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	envoy.NewServer(engine, zap.NewNop(), envoy.Options{}).Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func desc(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// status1 is a status with a limit; reset is in whole seconds, as
// statuses report it (rounded up).
func status1(code rlsv3.RateLimitResponse_Code, name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, rem uint32, reset int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     rem,
		DurationUntilReset: &durationpb.Duration{Seconds: reset},
	}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestShouldRateLimitTiers(t *testing.T) {
	c := start(t, limits.DefaultRequestLimits)
	ctx := context.Background()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		desc("generic_key", "global"),
		desc("tenant", "acme"),
		desc("tenant", "acme", "user", "alice"),
		desc("free", "x"),
		desc("nothing", "matches"),
	}}
	tests := []struct {
		give *rlsv3.RateLimitRequest
		want *rlsv3.RateLimitResponse
	}{{
		give: req,
		want: &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			// 900 ms to the end of the window, reported as 1 s.
			status1(ok, "", 100, rlsv3.RateLimitResponse_RateLimit_SECOND, 99, 1),
			status1(ok, "tenant", 50, rlsv3.RateLimitResponse_RateLimit_MINUTE, 49, 120),
			// Of the user's two limits, the bucket has the least left.
			status1(ok, "", 1, rlsv3.RateLimitResponse_RateLimit_SECOND, 1, 1),
			{Code: ok, LimitRemaining: math.MaxUint32},
			{Code: ok},
		}},
	}, {
		give: req,
		want: &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			status1(ok, "", 100, rlsv3.RateLimitResponse_RateLimit_SECOND, 98, 1),
			status1(ok, "tenant", 50, rlsv3.RateLimitResponse_RateLimit_MINUTE, 48, 120),
			status1(ok, "", 1, rlsv3.RateLimitResponse_RateLimit_SECOND, 0, 2),
			{Code: ok, LimitRemaining: math.MaxUint32},
			{Code: ok},
		}},
	}, {
		// The user's bucket is empty: the whole request is over limit and
		// the global and tenant tiers keep what they had.
		give: req,
		want: &rlsv3.RateLimitResponse{OverallCode: over, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			status1(ok, "", 100, rlsv3.RateLimitResponse_RateLimit_SECOND, 98, 1),
			status1(ok, "tenant", 50, rlsv3.RateLimitResponse_RateLimit_MINUTE, 48, 120),
			status1(over, "", 1, rlsv3.RateLimitResponse_RateLimit_SECOND, 0, 1),
			{Code: ok, LimitRemaining: math.MaxUint32},
			{Code: ok},
		}},
	}}
	for i, tt := range tests {
		got, err := c.ShouldRateLimit(ctx, tt.give)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("request %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestShouldRateLimitOverrideAndHits(t *testing.T) {
	c := start(t, limits.DefaultRequestLimits)
	ctx := context.Background()
	d := desc("tenant", "beta")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	got, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	want := status1(ok, "", 5, rlsv3.RateLimitResponse_RateLimit_HOUR, 2, 3600)
	if diff := cmp.Diff(want, got.Statuses[0], protocmp.Transform()); diff != "" {
		t.Errorf("override (-want +got):\n%s", diff)
	}
	// A descriptor's own hits_addend wins over the request's; 0 checks
	// without consuming.
	d.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		got, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if r := got.Statuses[0].LimitRemaining; r != 2 {
			t.Errorf("remaining after a zero-hit check = %d, want 2", r)
		}
	}
}

func TestShouldRateLimitInvalidArgument(t *testing.T) {
	lim := limits.RequestLimits{MaxDescriptors: 2, MaxEntries: 2, MaxValueBytes: 8, MaxHits: 10}
	c := start(t, lim)
	ctx := context.Background()
	many := func(n int) []*rlscommon.RateLimitDescriptor {
		var ds []*rlscommon.RateLimitDescriptor
		for range n {
			ds = append(ds, desc("k", "v"))
		}
		return ds
	}
	withHits := desc("k", "v")
	withHits.HitsAddend = wrapperspb.UInt64(11)
	badUnit := desc("k", "v")
	badUnit.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	tests := []struct {
		name string
		give *rlsv3.RateLimitRequest
		want string // the field the message must name
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many(1)}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many(3)}, "descriptors"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{{}}}, "descriptors[0].entries"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("a", "1", "b", "2", "c", "3")}}, "descriptors[0].entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("k", "v"), desc("", "v")}}, "descriptors[1].entries[0].key"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("k", "123456789")}}, "descriptors[0].entries[0].value"},
		{"request hits", &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 11, Descriptors: many(1)}, "hits_addend"},
		{"descriptor hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{withHits}}, "descriptors[0].hits_addend"},
		{"override unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{badUnit}}, "descriptors[0].limit.unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(ctx, tt.give)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tt.want+": ") {
				t.Errorf("message %q does not start with the field %q", msg, tt.want)
			}
			// The server keeps serving.
			if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many(1)}); err != nil {
				t.Errorf("valid request after a bad one: %v", err)
			}
		})
	}
}

func TestUnknownDomainIsOK(t *testing.T) {
	c := start(t, limits.DefaultRequestLimits)
	got, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*rlscommon.RateLimitDescriptor{desc("generic_key", "global")}})
	if err != nil {
		t.Fatal(err)
	}
	want := &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: ok}}}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
