package envoy

import (
	"context"
	"errors"
	"fmt"
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
// codec that decodes RLS requests directly. Everything else (responses, and
// the health and reflection services) uses the standard codec.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{std: encoding.GetCodecV2(proto.Name)})}
}

type codec struct{ std encoding.CodecV2 }

func (c codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*work); ok {
		buf := make([]byte, data.Len())
		data.CopyTo(buf)
		return w.decode(unsafe.String(unsafe.SliceData(buf), len(buf)))
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
	if interceptor == nil {
		return s.decide(ctx, w)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	// Interceptors see the decoded request as *limits.Request.
	return interceptor(ctx, &w.req, info, func(ctx context.Context, _ any) (any, error) { return s.decide(ctx, w) })
}

var errWire = errors.New("malformed RateLimitRequest")

// wire reads protobuf wire format from a string.
type wire struct {
	s string
	i int
}

func (r *wire) more() bool { return r.i < len(r.s) }

func (r *wire) varint() (uint64, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.i >= len(r.s) {
			return 0, errWire
		}
		b := r.s[r.i]
		r.i++
		if shift == 63 && b > 1 {
			return 0, errWire // more than 64 bits
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errWire
}

func (r *wire) tag() (num uint64, typ uint64, err error) {
	t, err := r.varint()
	if err != nil {
		return 0, 0, err
	}
	if t>>3 == 0 || t>>3 > 1<<29-1 {
		return 0, 0, errWire
	}
	return t >> 3, t & 7, nil
}

func (r *wire) bytes() (string, error) {
	n, err := r.varint()
	if err != nil || n > uint64(len(r.s)-r.i) {
		return "", errWire
	}
	s := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return s, nil
}

func (r *wire) str(field string) (string, error) {
	s, err := r.bytes()
	if err == nil && !utf8.ValidString(s) {
		return "", fmt.Errorf("%s: invalid UTF-8", field)
	}
	return s, err
}

// skip skips one field's value of wire type typ (num is its field number,
// for groups).
func (r *wire) skip(num, typ uint64) error {
	switch typ {
	case 0:
		_, err := r.varint()
		return err
	case 1, 5:
		n := 8
		if typ == 5 {
			n = 4
		}
		if len(r.s)-r.i < n {
			return errWire
		}
		r.i += n
		return nil
	case 2:
		_, err := r.bytes()
		return err
	case 3:
		for {
			n, t, err := r.tag()
			if err != nil {
				return err
			}
			if t == 4 {
				if n != num {
					return errWire
				}
				return nil
			}
			if err := r.skip(n, t); err != nil {
				return err
			}
		}
	}
	return errWire
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
	for r.more() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == 2:
			if w.req.Domain, err = r.str("domain"); err != nil {
				return err
			}
		case num == 2 && typ == 2:
			sub, err := r.bytes()
			if err != nil {
				return err
			}
			if err := w.descriptor(sub); err != nil {
				return err
			}
		case num == 3 && typ == 0:
			v, err := r.varint()
			if err != nil {
				return err
			}
			w.req.Hits = uint64(uint32(v))
		default:
			if err := r.skip(num, typ); err != nil {
				return err
			}
		}
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
	for r.more() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == 2:
			sub, err := r.bytes()
			if err != nil {
				return err
			}
			e, err := entry(sub)
			if err != nil {
				return err
			}
			w.entries = append(w.entries, e)
		case num == 2 && typ == 2:
			sub, err := r.bytes()
			if err != nil {
				return err
			}
			over.set = true
			if err := over.decode(sub); err != nil {
				return err
			}
		case num == 3 && typ == 2:
			sub, err := r.bytes()
			if err != nil {
				return err
			}
			desc.HasHits = true
			if err := uint64Value(sub, &desc.Hits); err != nil {
				return err
			}
		default:
			if err := r.skip(num, typ); err != nil {
				return err
			}
		}
	}
	desc.Entries = w.entries[start:len(w.entries):len(w.entries)]
	w.descs = append(w.descs, desc)
	w.over = append(w.over, over)
	return nil
}

func entry(msg string) (limits.Entry, error) {
	var e limits.Entry
	r := wire{s: msg}
	for r.more() {
		num, typ, err := r.tag()
		if err != nil {
			return e, err
		}
		switch {
		case num == 1 && typ == 2:
			if e.Key, err = r.str("key"); err != nil {
				return e, err
			}
		case num == 2 && typ == 2:
			if e.Value, err = r.str("value"); err != nil {
				return e, err
			}
		default:
			if err := r.skip(num, typ); err != nil {
				return e, err
			}
		}
	}
	return e, nil
}

// override is a descriptor's limit override as decoded; set tells whether
// the descriptor had one.
type override struct {
	limits.Override
	set bool
}

func (o *override) decode(msg string) error {
	r := wire{s: msg}
	for r.more() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == 0:
			v, err := r.varint()
			if err != nil {
				return err
			}
			o.Requests = uint64(uint32(v))
		case num == 2 && typ == 0:
			v, err := r.varint()
			if err != nil {
				return err
			}
			o.Unit = limits.Unit(int32(v))
		default:
			if err := r.skip(num, typ); err != nil {
				return err
			}
		}
	}
	return nil
}

func uint64Value(msg string, v *uint64) error {
	r := wire{s: msg}
	for r.more() {
		num, typ, err := r.tag()
		if err != nil {
			return err
		}
		if num == 1 && typ == 0 {
			if *v, err = r.varint(); err != nil {
				return err
			}
			continue
		}
		if err := r.skip(num, typ); err != nil {
			return err
		}
	}
	return nil
}
