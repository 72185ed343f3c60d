package envoy

import (
	"runtime"
	"strconv"
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
	refund := d("user", "u3")
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(5), true
	return []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{refund, d("user", "u4")}},
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
		t.Fatalf("proto.Unmarshal error %v, wire decoder error %v, for %x", perr, werr, head(data))
	}
	if perr != nil {
		return
	}
	want.fill(&pb)
	if diff := cmp.Diff(want.req, got.req, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("decoded requests differ for %x (-proto +wire):\n%s", head(data), diff)
	}
}

// head is the start of data, for messages.
func head(data []byte) []byte { return data[:min(len(data), 64)] }

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
	desc = protowire.AppendTag(desc, 4, protowire.VarintType) // is_negative_hits: any varint but 0 is true
	desc = protowire.AppendVarint(desc, 2)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, desc)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<33+5) // uint32 keeps the low bits
	decodeBoth(t, b)
	decodeBoth(t, b[:len(b)-1])
	decodeBoth(t, append(protowire.AppendTag(nil, 1, protowire.BytesType), 2, 0xff, 0xfe))
	decodeBoth(t, []byte{0x00, 0x01})
}

// groups returns an unknown field 15 of depth nested groups, of which
// the innermost unclosed have no end-group tag.
func groups(depth, unclosed int) []byte {
	var b []byte
	for range depth {
		b = protowire.AppendTag(b, 15, protowire.StartGroupType)
	}
	for range depth - unclosed {
		b = protowire.AppendTag(b, 15, protowire.EndGroupType)
	}
	return b
}

// TestWireGroupsMatchProto: the decoder takes groups nested exactly as
// deep as proto.Unmarshal does, and refuses what it refuses.
func TestWireGroupsMatchProto(t *testing.T) {
	for _, depth := range []int{1, 2, maxGroupDepth - 1, maxGroupDepth, maxGroupDepth + 1, 3 * maxGroupDepth} {
		decodeBoth(t, groups(depth, 0))
		decodeBoth(t, groups(depth, 1))
	}
	mismatched := append(protowire.AppendTag(groups(2, 1), 16, protowire.EndGroupType), groups(1, 0)...)
	decodeBoth(t, mismatched)
	// Inside a descriptor and an entry, after a known field.
	d := protowire.AppendTag(nil, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k"), groups(maxGroupDepth, 0)...))
	d = append(d, groups(maxGroupDepth+1, 0)...)
	decodeBoth(t, protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), d))
}

// adversarial is a 4 MB request of unknown groups nested as deep as
// allowed, over and over, ending in one nested too deep: the costliest
// shape to skip. normal is a request of the same size that the decoder
// keeps: descriptors of three short entries each, as Envoy sends.
func adversarial() (bad, normal []byte) {
	const size = 4 << 20
	block := groups(maxGroupDepth, 0)
	for len(bad)+len(block) < size {
		bad = append(bad, block...)
	}
	bad = append(bad, groups(maxGroupDepth+1, 0)...)
	r := &rlsv3.RateLimitRequest{Domain: "edge"}
	for size := 0; size < len(bad); size += proto.Size(r.Descriptors[len(r.Descriptors)-1]) + 4 {
		n := strconv.Itoa(len(r.Descriptors))
		r.Descriptors = append(r.Descriptors, &rlscommon.RateLimitDescriptor{Entries: []*rlscommon.RateLimitDescriptor_Entry{
			{Key: "generic_key", Value: "global"}, {Key: "tenant", Value: "t" + n}, {Key: "user", Value: "u" + n},
		}})
	}
	normal, err := proto.Marshal(r)
	if err != nil {
		panic(err)
	}
	return bad, normal
}

// decodeCost decodes msg once on a new goroutine and returns the bytes
// it allocated and the goroutine stacks in use when it ended, which
// include the stack the decoder grew.
func decodeCost(msg []byte) (allocated, stack uint64, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var w work
		err = w.decode(string(msg))
		runtime.ReadMemStats(&after)
		allocated, stack = after.TotalAlloc-before.TotalAlloc, after.StackInuse
	}()
	<-done
	return allocated, stack, err
}

// TestAdversarialDecodeCost: a 4 MB message of nested groups costs the
// decoder no more memory than a normal message of that size, and grows
// no stack with its nesting. (Its time is in BenchmarkWireDecodeSize.)
func TestAdversarialDecodeCost(t *testing.T) {
	bad, normal := adversarial()
	allocBad, stackBad, err := decodeCost(bad)
	if err == nil {
		t.Fatal("groups nested too deep were accepted")
	}
	allocNormal, stackNormal, err := decodeCost(normal)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d-byte adversarial message: %d B allocated, %d B of stacks; %d-byte normal message: %d B, %d B",
		len(bad), allocBad, stackBad, len(normal), allocNormal, stackNormal)
	if allocBad > allocNormal+64<<10 {
		t.Errorf("adversarial message allocated %d B, more than the normal message's %d B", allocBad, allocNormal)
	}
	if stackBad > stackNormal+1<<20 {
		t.Errorf("stacks in use %d B after the adversarial message, %d B after the normal one", stackBad, stackNormal)
	}
}

// FuzzWireDecode: the wire decoder agrees with protobuf on every input.
func FuzzWireDecode(f *testing.F) {
	for _, r := range seedRequests() {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Add(groups(40, 0))
	f.Add(groups(40, 3))
	f.Add(append(groups(5, 0), groups(maxGroupDepth+1, 0)...))
	f.Fuzz(func(t *testing.T, data []byte) { decodeBoth(t, data) })
}

// BenchmarkWireDecodeSize decodes a 4 MB message of nested groups and a
// normal message of the same size (see adversarial).
func BenchmarkWireDecodeSize(b *testing.B) {
	bad, normal := adversarial()
	for _, bm := range []struct {
		name string
		msg  []byte
	}{{"adversarial", bad}, {"deep", groups(len(bad)/2, len(bad)/2)}, {"normal", normal}} {
		b.Run(bm.name, func(b *testing.B) {
			var w work
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.msg)))
			for b.Loop() {
				w.decode(string(bm.msg)) //nolint:errcheck // the adversarial message fails
			}
		})
	}
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
