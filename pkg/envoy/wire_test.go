package envoy

import (
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func seedRequests() []*rlsv3.RateLimitRequest {
	d := func(kv ...string) *rlscommon.RateLimitDescriptor {
		x := &rlscommon.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			x.Entries = append(x.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return x
	}
	over := d("tenant", "beta")
	over.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
	hits := d("user", "u1")
	hits.HitsAddend = wrapperspb.UInt64(0)
	big := d("user", "u2")
	big.HitsAddend = wrapperspb.UInt64(1 << 40)
	return []*rlsv3.RateLimitRequest{
		{},
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d("generic_key", "global"), d("tenant", "t1"), d("tenant", "t1", "user", "u9")}},
		{Domain: "edge", HitsAddend: 7, Descriptors: []*rlscommon.RateLimitDescriptor{over, hits, big, d("", ""), {}}},
	}
}

// decodeBoth decodes data with protobuf (then fill) and with the wire
// decoder; errors must agree and, without error, so must the requests.
func decodeBoth(t *testing.T, data []byte) {
	t.Helper()
	var pb rlsv3.RateLimitRequest
	perr := proto.Unmarshal(data, &pb)
	var want, got work
	werr := got.decode(string(data))
	if (perr == nil) != (werr == nil) {
		t.Fatalf("proto.Unmarshal error %v, wire decoder error %v, for %x", perr, werr, data)
	}
	if perr != nil {
		return
	}
	want.fill(&pb)
	if diff := cmp.Diff(want.req, got.req, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("decoded requests differ for %x (-proto +wire):\n%s", data, diff)
	}
}

func TestWireDecodeMatchesProto(t *testing.T) {
	for _, r := range seedRequests() {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		decodeBoth(t, b)
	}
	// Hand-made wire: unknown fields of every type, a known field with the
	// wrong wire type, a group, repeated and merged submessages, a
	// truncated message, invalid UTF-8, field number 0.
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "edge")
	b = protowire.AppendTag(b, 1, protowire.VarintType) // wrong type: unknown
	b = protowire.AppendVarint(b, 3)
	b = protowire.AppendTag(b, 99, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1)
	b = protowire.AppendTag(b, 98, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 1)
	b = protowire.AppendTag(b, 97, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 97, protowire.EndGroupType)
	var desc []byte
	for _, v := range []string{"a", "b"} {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, "k")
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, v)
		desc = protowire.AppendTag(desc, 1, protowire.BytesType)
		desc = protowire.AppendBytes(desc, e)
	}
	var o1, o2 []byte
	o1 = protowire.AppendTag(o1, 1, protowire.VarintType)
	o1 = protowire.AppendVarint(o1, 10)
	o2 = protowire.AppendTag(o2, 2, protowire.VarintType)
	o2 = protowire.AppendVarint(o2, 3)
	desc = protowire.AppendTag(desc, 2, protowire.BytesType)
	desc = protowire.AppendBytes(desc, o1)
	desc = protowire.AppendTag(desc, 2, protowire.BytesType) // merges into the first
	desc = protowire.AppendBytes(desc, o2)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, desc)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<33+5) // uint32 keeps the low bits
	decodeBoth(t, b)
	decodeBoth(t, b[:len(b)-1])
	decodeBoth(t, append(protowire.AppendTag(nil, 1, protowire.BytesType), 2, 0xff, 0xfe))
	decodeBoth(t, []byte{0x00, 0x01})
}

// FuzzWireDecode: the wire decoder agrees with protobuf on every input.
func FuzzWireDecode(f *testing.F) {
	for _, r := range seedRequests() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { decodeBoth(t, data) })
}

func BenchmarkWireDecode(b *testing.B) {
	data, err := proto.Marshal(seedRequests()[2])
	if err != nil {
		b.Fatal(err)
	}
	var w work
	b.ReportAllocs()
	for b.Loop() {
		if err := w.decode(string(data)); err != nil {
			b.Fatal(err)
		}
	}
}
