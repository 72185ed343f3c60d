package envoy_test

import (
	"context"
	"math"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// refStatus is a descriptor status as a test writes it: its code and
// what remains.
type refStatus struct {
	Code      rlsv3.RateLimitResponse_Code
	Remaining uint32
}

var (
	rok   = rlsv3.RateLimitResponse_OK
	rover = rlsv3.RateLimitResponse_OVER_LIMIT
)

// entries makes a descriptor of key=value pairs.
func entries(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestReferenceExampleRules: envoyproxy/ratelimit's example rule files
// (pkg/config/testdata/envoyproxy) decide a sequence of requests as the
// reference does, quota_mode and metadata included, with
// RESPONSE_DYNAMIC_METADATA's option on. Each step's expectation comes
// from the reference's service (src/service/ratelimit.go): OVER_LIMIT
// when a descriptor without quota_mode is over or every quota_mode one
// is; per descriptor the limiter's status; and under "metadata" the
// metadata of the rules of the descriptors whose status is not
// OVER_LIMIT, merged in request order, the first value of a key winning.
// Where this sidecar differs on purpose, a comment says so.
func TestReferenceExampleRules(t *testing.T) {
	rs, err := config.Load("../config/testdata/envoyproxy", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
	srv := envoy.NewServer(e, zap.NewNop(), envoy.Options{DynamicMetadata: true})
	services := []*rlscommon.RateLimitDescriptor{entries("service", "service_1"), entries("service", "service_2")}
	tests := []struct {
		name     string
		domain   string
		give     []*rlscommon.RateLimitDescriptor
		code     rlsv3.RateLimitResponse_Code
		statuses []refStatus
		metadata map[string]any // nil: no "metadata" field
	}{
		// service_1 allows 1 a minute, service_2 2; both quota_mode.
		{"quota_both_room", "rl", services, rok, []refStatus{{rok, 0}, {rok, 1}},
			map[string]any{"service_with_quota": map[string]any{"name": "service_1"}}},
		{"quota_one_over", "rl", services, rok, []refStatus{{rover, 0}, {rok, 0}},
			map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}},
		{"quota_all_over", "rl", services, rover, []refStatus{{rover, 0}, {rover, 0}}, nil},
		{"plain", "rl", []*rlscommon.RateLimitDescriptor{entries("foo", "x")}, rok, []refStatus{{rok, 1}}, nil},
		// Every quota descriptor (one) is over. The reference counts foo's
		// hit all the same (0 left); a rejected request consumes nothing
		// here, so 1 is left.
		{"plain_and_quota_over", "rl", []*rlscommon.RateLimitDescriptor{entries("foo", "x"), entries("service", "service_2")}, rover,
			[]refStatus{{rok, 1}, {rover, 0}}, nil},
		{"unlimited", "rl", []*rlscommon.RateLimitDescriptor{entries("qux", "any")}, rok, []refStatus{{rok, math.MaxUint32}}, nil},
		{"banned", "rl", []*rlscommon.RateLimitDescriptor{entries("foo", "x", "bar", "banned")}, rover, []refStatus{{rover, 0}}, nil},
		{"nested", "rl", []*rlscommon.RateLimitDescriptor{entries("source_cluster", "proxy", "destination_cluster", "mock")}, rok, []refStatus{{rok, 0}}, nil},
		{"mongo", "mongo_cps", []*rlscommon.RateLimitDescriptor{entries("database", "users")}, rok, []refStatus{{rok, 499}}, nil},
		{"metadata_merged", "test-domain", []*rlscommon.RateLimitDescriptor{entries("key1", "value1", "subkey1", "something"), entries("key2", "x")}, rok,
			[]refStatus{{rok, 4}, {rok, 19}}, map[string]any{"name": "service_1", "service_with_quota": map[string]any{"name": "service_2"}}},
		// A rule without metadata adds none.
		{"metadata_none", "test-domain", []*rlscommon.RateLimitDescriptor{entries("key1", "value1", "subkey1", "subvalue1")}, rok, []refStatus{{rok, 9}}, nil},
	}
	for _, tt := range tests {
		resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: tt.domain, Descriptors: tt.give})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got []refStatus
		for _, st := range resp.GetStatuses() {
			got = append(got, refStatus{st.GetCode(), st.GetLimitRemaining()})
		}
		if resp.GetOverallCode() != tt.code || !cmp.Equal(got, tt.statuses) {
			t.Errorf("%s: %v %v, want %v %v", tt.name, resp.GetOverallCode(), got, tt.code, tt.statuses)
		}
		md, ok := resp.GetDynamicMetadata().GetFields()["metadata"]
		switch {
		case tt.metadata == nil && ok:
			t.Errorf("%s: dynamic_metadata.metadata %v, want none", tt.name, md)
		case tt.metadata != nil:
			want, err := structpb.NewStruct(tt.metadata)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, md.GetStructValue(), protocmp.Transform()); diff != "" {
				t.Errorf("%s: dynamic_metadata.metadata (-want +got):\n%s", tt.name, diff)
			}
		}
	}
}

// TestRuleMetadataNeedsTheOption: a rule's metadata reaches
// dynamic_metadata only with DynamicMetadata, as in the reference.
func TestRuleMetadataNeedsTheOption(t *testing.T) {
	rs, err := config.Load("../config/testdata/envoyproxy", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
	srv := envoy.NewServer(e, zap.NewNop(), envoy.Options{})
	resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlscommon.RateLimitDescriptor{entries("key2", "x")}})
	if err != nil || resp.DynamicMetadata != nil {
		t.Errorf("without the option: dynamic_metadata %v, %v; want none", resp.GetDynamicMetadata(), err)
	}
}
