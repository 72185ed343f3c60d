package envoy_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// rawCodec sends a []byte as the request message as it is, so a test can
// put any bytes on the wire, and reads the reply's bytes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// invalids counts the decisions an engine's observer sees fail with a
// *limits.RequestError.
type invalids struct{ n atomic.Int64 }

func (o *invalids) Observe(_ *limits.Request, _ *limits.Decision, _ time.Duration, err error) {
	if errors.As(err, new(*limits.RequestError)) {
		o.n.Add(1)
	}
}

// TestMalformedRequestIsInvalidArgument: bytes that are not a
// RateLimitRequest get InvalidArgument naming the field that is wrong,
// and are counted as invalid requests, on the gRPC path that decodes the
// wire itself.
func TestMalformedRequestIsInvalidArgument(t *testing.T) {
	obs := new(invalids)
	conn := serve(t, memory.Options{}, limits.EngineOptions{Observer: obs}, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))

	entry := func(k, v []byte) []byte {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendBytes(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		return protowire.AppendBytes(e, v)
	}
	descriptor := func(entries ...[]byte) []byte {
		var d []byte
		for _, e := range entries {
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		return d
	}
	request := func(descs ...[]byte) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "edge")
		for _, d := range descs {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, d)
		}
		return b
	}
	good := descriptor(entry([]byte("generic_key"), []byte("global")))
	tests := []struct {
		name string
		give []byte
		want string // the start of the status message: the field path
	}{
		{"truncated", request(good)[:5], "request: length runs past"},
		{"field number 0", []byte{0x00, 0x01}, "request: invalid field number"},
		{"bad UTF-8 in a value", request(good, descriptor(entry([]byte("tenant"), []byte{0xff}))), "descriptors[1].entries[0].value: invalid UTF-8"},
		{"bad UTF-8 in a key", request(descriptor(entry([]byte("a"), []byte("b")), entry([]byte{0xc3}, nil))), "descriptors[0].entries[1].key: invalid UTF-8"},
		{"groups nested too deep", envoy.NestedGroups(10002, 0), "request: groups nested more than"},
		{"group without its end", envoy.NestedGroups(3, 2), "request: group has no end-group tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := obs.n.Load()
			var reply []byte
			err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &tt.give, &reply)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tt.want) {
				t.Errorf("message %q, want it to start with %q", msg, tt.want)
			}
			if got := obs.n.Load() - before; got != 1 {
				t.Errorf("%d invalid requests counted, want 1", got)
			}
		})
	}

	// A well-formed request on the same connection is still decided.
	var reply []byte
	give := request(good)
	if err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &give, &reply); err != nil {
		t.Fatalf("well-formed request: %v", err)
	}
}
