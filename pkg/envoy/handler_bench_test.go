package envoy

import (
	"context"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// BenchmarkHandler runs the gRPC handler on a request's wire bytes:
// decode, decide on a memory store, encode; gRPC's transport left out.
func BenchmarkHandler(b *testing.B) {
	const rules = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s := NewServer(limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{}), zap.NewNop(), Options{})
	data, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "alice"}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	dec := func(v any) error {
		w := v.(*work)
		w.bad = w.decode(string(data))
		return nil
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := shouldRateLimitHandler(s, ctx, dec, nil)
		if err != nil {
			b.Fatal(err)
		}
		if rp, ok := r.(*reply); ok {
			d, _ := rp.take()
			d.Free()
		}
	}
}
