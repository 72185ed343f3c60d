package envoy

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestResetWholeSeconds checks that duration_until_reset goes out in
// whole seconds, rounded up, on both encoding paths: Envoy's
// X-RateLimit-Reset takes only its seconds, so a reset of 300 ms sent as
// such reads "reset 0", and the client retries at once.
func TestResetWholeSeconds(t *testing.T) {
	l, err := limits.NewLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give time.Duration
		want int64
	}{
		{0, 0},
		{1, 1},
		{300 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{49*time.Second + 999_999*time.Microsecond, 50},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
		// No store reports a negative reset; were one to, it is now.
		{-1500 * time.Millisecond, 0},
		{math.MinInt64, 0},
	}
	std := encoding.GetCodecV2(grpcproto.Name)
	for _, tt := range tests {
		d := &limits.Decision{Code: limits.OverLimit, Statuses: []limits.Status{{Code: limits.OverLimit, Limit: l, Reset: tt.give}}}
		resp := Response(d)
		if got := resp.Statuses[0].GetDurationUntilReset(); got.GetSeconds() != tt.want || got.GetNanos() != 0 {
			t.Errorf("reset %v: Response says %v, want %d s", tt.give, got, tt.want)
		}
		w := work{dec: *d}
		data, err := codec{std: std}.Marshal(w.encode(HeadersNone))
		if err != nil {
			t.Fatal(err)
		}
		var wire rlsv3.RateLimitResponse
		err = proto.Unmarshal(data.Materialize(), &wire)
		data.Free()
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.Statuses[0].GetDurationUntilReset(); got.GetSeconds() != tt.want || got.GetNanos() != 0 {
			t.Errorf("reset %v: the wire encoder says %v, want %d s", tt.give, got, tt.want)
		}
	}
}
