package envoy

import (
	"testing"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// benchDecision is what the tiered load sends back: three descriptors
// (global, tenant, tenant+user), all under their limits.
func benchDecision(tb testing.TB) *limits.Decision {
	tb.Helper()
	lim := func(alg limits.Algorithm, n uint64, u limits.Unit, name string) *limits.Limit {
		l, err := limits.NewLimit(alg, n, u, 1, 0)
		if err != nil {
			tb.Fatal(err)
		}
		l.Name = name
		return l
	}
	global := lim(limits.FixedWindow, 1_000_000_000, limits.UnitSecond, "")
	tenant := lim(limits.SlidingWindow, 1_000_000_000, limits.UnitMinute, "tenant")
	user := lim(limits.TokenBucket, 1_000_000, limits.UnitSecond, "")
	return &limits.Decision{Statuses: []limits.Status{
		{Limit: global, Remaining: 999_987_654, Reset: 420 * time.Millisecond},
		{Limit: tenant, Remaining: 999_999_001, Reset: 37*time.Second + 500*time.Millisecond},
		{Limit: user, Remaining: 999_999, Reset: time.Microsecond},
	}}
}

// BenchmarkResponseEncode measures a response from decision to the bytes
// gRPC sends.
func BenchmarkResponseEncode(b *testing.B) {
	d := benchDecision(b)
	std := encoding.GetCodecV2(proto.Name)
	for _, mode := range []HeaderMode{HeadersNone, HeadersIETF} {
		b.Run("message/"+mode.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := Response(d)
				AddHeaders(mode, d, resp)
				data, err := std.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
