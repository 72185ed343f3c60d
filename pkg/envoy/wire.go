package envoy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"
	"unsafe"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// The gRPC path decodes a RateLimitRequest's wire bytes straight into the
// pooled limits.Request, instead of building the proto message tree and
// converting it: protobuf's reflective decoding of that tree was a fifth of
// the server's CPU. Every string is a substring of one copy of the message,
// made once per request and never written again, so nothing aliases
// gRPC's reused buffers. A fuzz test checks the decoder against
// proto.Unmarshal.

// ServerOptions returns the options a grpc.Server needs for Register: a
// codec that decodes RLS requests and encodes RLS responses directly (see
// encode.go). Everything else (the health and reflection services, and
// RLS responses when an interceptor is installed) uses the standard codec.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(Codec(encoding.GetCodecV2(proto.Name)))}
}

// Codec returns the codec ServerOptions sets, with std for every message
// but RLS's, for a server that must also bound or decode others its own
// way.
func Codec(std encoding.CodecV2) encoding.CodecV2 { return codec{std: std} }

// MaxRequestBytes bounds an RLS request on gRPC, as a POST /json body
// is bounded: a request is smaller in protobuf than in JSON, so gRPC takes
// every request /json takes. The codec refuses a larger one before
// copying it, with ErrRequestTooLarge (RESOURCE_EXHAUSTED), whatever
// message size the server takes for other services.
const MaxRequestBytes = maxJSONBody

// ErrRequestTooLarge is why a request over MaxRequestBytes is refused.
var ErrRequestTooLarge = errors.New("request larger than the sidecar takes")

type codec struct{ std encoding.CodecV2 }

func (c codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*reply); ok {
		return r.take()
	}
	return c.std.Marshal(v)
}

// Unmarshal decodes into a *work without failing: a malformed request is
// kept in the work as its bad field, for the handler to answer
// InvalidArgument and count as invalid. gRPC would turn an error from
// here into Internal.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*work); ok {
		if n := data.Len(); n > MaxRequestBytes {
			w.bad = fmt.Errorf("%w: %d bytes, more than %d", ErrRequestTooLarge, n, MaxRequestBytes)
			return nil
		}
		buf := make([]byte, data.Len())
		data.CopyTo(buf)
		w.bad = w.decode(unsafe.String(unsafe.SliceData(buf), len(buf)))
		return nil
	}
	return c.std.Unmarshal(data, v)
}

// serviceDesc is the RLS service with a handler that decodes into *work.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	w := s.work.Get().(*work)
	defer s.work.Put(w)
	if err := dec(w); err != nil {
		return nil, err
	}
	if w.bad != nil {
		s.engine.Reject(&w.req, &w.dec, w.bad)
		return nil, s.statusError(w.bad)
	}
	if interceptor == nil {
		if err := s.decide(ctx, w); err != nil {
			return nil, err
		}
		if s.opts.message() {
			return s.response(w), nil
		}
		if r := w.encode(s.opts.Headers); r != nil {
			return r, nil
		}
		return s.response(w), nil // for the standard codec's error
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	// Interceptors see the decoded request as *limits.Request and the
	// response as a message (encoded by the standard codec), not a reply.
	return interceptor(ctx, &w.req, info, func(ctx context.Context, _ any) (any, error) { return s.answer(ctx, w) })
}

// maxGroupDepth is how deeply the decoder nests the unknown groups it
// skips: protobuf's own limit (protowire.DefaultRecursionLimit counts
// down from 10000 and refuses a group below 0), so that the decoder
// accepts exactly what proto.Unmarshal does. Skipping is a loop over an
// explicit stack of at most this many field numbers (40 KB), so the work
// of a message is linear in its size however it nests.
const maxGroupDepth = 10001

// Why a message is malformed. Each is a *limits.RequestError whose Field
// the enclosing messages prefix with their own (see within).
const (
	msgTruncated   = "truncated or overlong varint"
	msgLength      = "length runs past the end of the message"
	msgFieldNumber = "invalid field number"
	msgWireType    = "invalid wire type"
	msgFixed       = "truncated fixed-size value"
	msgEndGroup    = "end-group tag does not match its start"
	msgNoEndGroup  = "group has no end-group tag"
	msgDeepGroup   = "groups nested more than 10001 deep"
)

func malformed(msg string) error { return &limits.RequestError{Msg: msg} }

// within returns err, a *limits.RequestError of a submessage, with field
// (the submessage's name in its parent) prefixed to its field path.
func within(field string, err error) error {
	var re *limits.RequestError
	if err == nil || !errors.As(err, &re) {
		return err
	}
	path := field
	if re.Field != "" {
		path += "." + re.Field
	}
	return &limits.RequestError{Field: path, Msg: re.Msg}
}

// Field keys: a field number and wire type, as in a tag.
const (
	varintField = 0
	bytesField  = 2
)

func key(num, typ uint64) uint64 { return num<<3 | typ }

// wire reads protobuf wire format from a string. Its first error sticks:
// later reads return zero values and next reports false, so a decoder is
// a loop over next with one error check at the end.
type wire struct {
	s   string
	i   int
	num uint64 // the current field's number
	typ uint64 // and wire type
	err error
}

// next reads the next field's tag; it reports false at the end of the
// message or after an error.
func (r *wire) next() bool { return r.nextTag(1<<29 - 1) }

// nextTag is next with the largest field number accepted. protobuf's
// decoder takes fields up to 2^29-1 in a message but, inside an unknown
// group it skips, any up to MaxInt32; the decoders here match it exactly.
func (r *wire) nextTag(maxNum uint64) bool {
	if r.err != nil || r.i >= len(r.s) {
		return false
	}
	t := r.varint()
	if r.err == nil && (t>>3 == 0 || t>>3 > maxNum) {
		r.err = malformed(msgFieldNumber)
	}
	r.num, r.typ = t>>3, t&7
	return r.err == nil
}

// key returns the current field's number and wire type as one value.
func (r *wire) key() uint64 { return key(r.num, r.typ) }

func (r *wire) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *wire) varint() uint64 {
	var v uint64
	for shift := uint(0); shift < 64 && r.err == nil; shift += 7 {
		if r.i >= len(r.s) {
			break
		}
		b := r.s[r.i]
		r.i++
		if shift == 63 && b > 1 {
			break // more than 64 bits
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v
		}
	}
	r.fail(malformed(msgTruncated))
	return 0
}

func (r *wire) bytes() string {
	n := r.varint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.s)-r.i) {
		r.fail(malformed(msgLength))
		return ""
	}
	s := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return s
}

func (r *wire) str(field string) string {
	s := r.bytes()
	if r.err == nil && !utf8.ValidString(s) {
		r.fail(&limits.RequestError{Field: field, Msg: "invalid UTF-8"})
	}
	return s
}

// skip skips the current field's value.
func (r *wire) skip() { r.skipValue(r.typ) }

// skipValue skips a value of wire type typ, whose tag was just read.
func (r *wire) skipValue(typ uint64) {
	switch typ {
	case 0:
		r.varint()
	case 1, 5:
		n := 8
		if typ == 5 {
			n = 4
		}
		if len(r.s)-r.i < n {
			r.fail(malformed(msgFixed))
			return
		}
		r.i += n
	case 2:
		r.bytes()
	case 3:
		r.skipGroup()
	default:
		r.fail(malformed(msgWireType))
	}
}

// deepStacks holds the stacks of skipGroup that outgrew its inline
// array, each of capacity maxGroupDepth, so that a message of many deep
// groups allocates none after the first.
var deepStacks = sync.Pool{New: func() any {
	s := make([]uint32, 0, maxGroupDepth)
	return &s
}}

// skipGroup skips the group whose start tag was just read, and every
// group nested in it, with an explicit stack of the open groups' field
// numbers: no recursion, and no more than maxGroupDepth levels.
func (r *wire) skipGroup() {
	var inline [16]uint32
	open := r.skipGroups(append(inline[:0], uint32(r.num)))
	if cap(open) == maxGroupDepth {
		deepStacks.Put(&open)
	}
}

// skipGroups skips until every group of open (field numbers, innermost
// last) has ended, or the message is found malformed. It returns the
// stack, which it may have moved to one of deepStacks.
func (r *wire) skipGroups(open []uint32) []uint32 {
	for len(open) > 0 {
		if !r.nextTag(math.MaxInt32) {
			r.fail(malformed(msgNoEndGroup))
			return open
		}
		switch r.typ {
		case 3:
			if len(open) >= maxGroupDepth {
				r.fail(malformed(msgDeepGroup))
				return open
			}
			if len(open) == cap(open) {
				deep := *deepStacks.Get().(*[]uint32)
				open = append(deep[:0], open...)
			}
			open = append(open, uint32(r.num))
		case 4:
			if uint32(r.num) != open[len(open)-1] {
				r.fail(malformed(msgEndGroup))
				return open
			}
			open = open[:len(open)-1]
		default:
			r.skipValue(r.typ)
		}
	}
	return open
}

// decode fills w from a RateLimitRequest's wire bytes, as fill does from
// the message. Fields of an unexpected wire type are skipped, as protobuf
// skips them.
func (w *work) decode(msg string) error {
	w.entries = growEntries(w.entries, 0)
	w.descs = w.descs[:0]
	w.over = w.over[:0]
	w.req = limits.Request{}
	r := wire{s: msg}
	for r.next() {
		switch r.key() {
		case key(1, bytesField):
			w.req.Domain = r.str("domain")
		case key(2, bytesField):
			if sub := r.bytes(); r.err == nil {
				if err := w.descriptor(sub); err != nil {
					r.fail(within(fmt.Sprintf("descriptors[%d]", len(w.descs)-1), err))
				}
			}
		case key(3, varintField):
			w.req.Hits = uint64(uint32(r.varint()))
		default:
			r.skip()
		}
	}
	if r.err != nil {
		var re *limits.RequestError
		if errors.As(r.err, &re) && re.Field == "" {
			re.Field = "request"
		}
		return r.err
	}
	for i := range w.descs {
		if w.over[i].set {
			w.descs[i].Override = &w.over[i].Override
		}
	}
	w.req.Descriptors = w.descs
	return nil
}

func (w *work) descriptor(msg string) error {
	start := len(w.entries)
	var desc limits.Descriptor
	var over override
	r := wire{s: msg}
	for r.next() {
		switch r.key() {
		case key(1, bytesField):
			e, err := entry(r.bytes())
			if err != nil {
				r.fail(within(fmt.Sprintf("entries[%d]", len(w.entries)-start), err))
			}
			w.entries = append(w.entries, e)
		case key(2, bytesField):
			over.set = true
			r.fail(within("limit", over.decode(r.bytes())))
		case key(3, bytesField):
			desc.HasHits = true
			var err error
			desc.Hits, err = uint64Value(r.bytes(), desc.Hits)
			r.fail(within("hits_addend", err))
		case key(4, varintField):
			desc.Negative = r.varint() != 0
		default:
			r.skip()
		}
	}
	desc.Entries = w.entries[start:len(w.entries):len(w.entries)]
	w.descs = append(w.descs, desc)
	w.over = append(w.over, over)
	return r.err
}

// entry decodes a descriptor entry.
func entry(msg string) (limits.Entry, error) {
	var e limits.Entry
	r := wire{s: msg}
	for r.next() {
		switch r.key() {
		case key(1, bytesField):
			e.Key = r.str("key")
		case key(2, bytesField):
			e.Value = r.str("value")
		default:
			r.skip()
		}
	}
	return e, r.err
}

// override is a descriptor's limit override as decoded; set tells whether
// the descriptor had one.
type override struct {
	limits.Override
	set bool
}

// decode merges an override message into o, as protobuf merges a repeated
// submessage.
func (o *override) decode(msg string) error {
	r := wire{s: msg}
	for r.next() {
		switch r.key() {
		case key(1, varintField):
			o.Requests = uint64(uint32(r.varint()))
		case key(2, varintField):
			o.Unit = limits.Unit(int32(r.varint()))
		default:
			r.skip()
		}
	}
	return r.err
}

// uint64Value decodes a google.protobuf.UInt64Value merged over v.
func uint64Value(msg string, v uint64) (uint64, error) {
	r := wire{s: msg}
	for r.next() {
		if r.key() == key(1, varintField) {
			v = r.varint()
		} else {
			r.skip()
		}
	}
	return v, r.err
}
