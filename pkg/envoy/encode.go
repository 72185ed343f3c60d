package envoy

import (
	"errors"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// The gRPC path encodes a RateLimitResponse straight from the decision,
// instead of building the message tree (about a dozen objects for three
// descriptors) and marshalling it by reflection. The bytes are those
// proto.Marshal gives for Response and AddHeaders: fields in number order,
// proto3 zero values left out. A differential test and a fuzz test hold
// the two paths together.

// Field numbers of the RLS v3 response messages.
const (
	// RateLimitResponse
	fieldOverallCode protowire.Number = 1
	fieldStatuses    protowire.Number = 2
	fieldHeaders     protowire.Number = 3 // response_headers_to_add
	// RateLimitResponse.DescriptorStatus
	fieldCode         protowire.Number = 1
	fieldCurrentLimit protowire.Number = 2
	fieldRemaining    protowire.Number = 3 // limit_remaining
	fieldReset        protowire.Number = 4 // duration_until_reset
	// RateLimitResponse.RateLimit
	fieldRequests protowire.Number = 1 // requests_per_unit
	fieldUnit     protowire.Number = 2
	fieldName     protowire.Number = 3
	// google.protobuf.Duration
	fieldSeconds protowire.Number = 1 // nanos (2) are always 0: see resetSeconds
	// config.core.v3.HeaderValue
	fieldKey   protowire.Number = 1
	fieldValue protowire.Number = 2
)

// reply is an encoded RateLimitResponse, which the codec's Marshal hands
// to gRPC as it is. It owns its bytes: they alias nothing in the pooled
// work, so the work can be reused as soon as the handler returns.
type reply struct {
	buf  [1]mem.Buffer
	data mem.BufferSlice // buf[:], until Marshal hands it to gRPC
}

var errReplySent = errors.New("envoy: RLS reply marshalled twice")

// take hands r's bytes to the caller, who must Free them; a second call
// fails, so a buffer is never freed twice.
func (r *reply) take() (mem.BufferSlice, error) {
	data := r.data
	if data == nil {
		return nil, errReplySent
	}
	r.data = nil
	return data, nil
}

// encode encodes the response to w.dec with the headers of mode. A
// response up to gRPC's pooling threshold (1 KiB) is one allocation of
// its exact size, as gRPC's own codec does; a larger one comes from
// gRPC's default buffer pool and goes back to it only when gRPC frees the
// BufferSlice (mem.Buffer's reference count), never while gRPC may still
// be writing it.
//
// encode returns nil if a reported limit's name is not valid UTF-8:
// proto.Marshal refuses such a message, and the caller sends the message
// instead, so that the call fails as it would with the standard codec.
func (w *work) encode(mode HeaderMode) *reply {
	for i := range w.dec.Statuses {
		if l := report(&w.dec.Statuses[i]).limit; l != nil && !utf8.ValidString(l.Name) {
			return nil
		}
	}
	w.hdr.build(mode, &w.dec)
	n := responseSize(&w.dec, &w.hdr)
	r := new(reply)
	if mem.IsBelowBufferPoolingThreshold(n) {
		r.buf[0] = mem.SliceBuffer(appendResponse(make([]byte, 0, n), &w.dec, &w.hdr))
	} else {
		pool := mem.DefaultBufferPool()
		b := pool.Get(n)
		*b = appendResponse((*b)[:0], &w.dec, &w.hdr)
		r.buf[0] = mem.NewBuffer(b, pool)
	}
	r.data = r.buf[:]
	return r
}

func responseSize(d *limits.Decision, h *headers) int {
	n := varintSize(fieldOverallCode, uint64(code(d.Code)))
	for i := range d.Statuses {
		n += messageSize(fieldStatuses, statusSize(&d.Statuses[i]))
	}
	for i := range h.n {
		n += messageSize(fieldHeaders, headerSize(h.keys[i], h.value(i)))
	}
	return n
}

func appendResponse(b []byte, d *limits.Decision, h *headers) []byte {
	b = appendVarint(b, fieldOverallCode, uint64(code(d.Code)))
	for i := range d.Statuses {
		st := &d.Statuses[i]
		b = appendMessage(b, fieldStatuses, statusSize(st))
		b = appendStatus(b, st)
	}
	for i := range h.n {
		k, v := h.keys[i], h.value(i)
		b = appendMessage(b, fieldHeaders, headerSize(k, v))
		b = appendBytes(b, fieldKey, k)
		b = appendBytes(b, fieldValue, v)
	}
	return b
}

func statusSize(st *limits.Status) int {
	r := report(st)
	n := varintSize(fieldCode, uint64(r.code)) + varintSize(fieldRemaining, uint64(r.remaining))
	if r.limit != nil {
		n += messageSize(fieldCurrentLimit, limitSize(&r))
		n += messageSize(fieldReset, varintSize(fieldSeconds, uint64(resetSeconds(st.Reset))))
	}
	return n
}

func appendStatus(b []byte, st *limits.Status) []byte {
	r := report(st)
	b = appendVarint(b, fieldCode, uint64(r.code))
	if r.limit != nil {
		b = appendMessage(b, fieldCurrentLimit, limitSize(&r))
		b = appendVarint(b, fieldRequests, uint64(r.requests))
		b = appendVarint(b, fieldUnit, uint64(r.limit.Unit)) // int32: sign-extended
		b = appendBytes(b, fieldName, r.limit.Name)
	}
	b = appendVarint(b, fieldRemaining, uint64(r.remaining))
	if r.limit != nil {
		reset := uint64(resetSeconds(st.Reset))
		b = appendMessage(b, fieldReset, varintSize(fieldSeconds, reset))
		b = appendVarint(b, fieldSeconds, reset)
	}
	return b
}

// limitSize requires r.limit != nil.
func limitSize(r *reported) int {
	return varintSize(fieldRequests, uint64(r.requests)) +
		varintSize(fieldUnit, uint64(r.limit.Unit)) +
		bytesSize(fieldName, len(r.limit.Name))
}

// resetSeconds is the duration_until_reset reported for a reset of d:
// whole seconds, rounded up, and 0 for a reset that is not positive.
// Envoy's X-RateLimit-Reset is the seconds of duration_until_reset,
// truncated, so a reset of 300 ms sent as such would tell the client
// "reset 0", and it would retry at once, to be rejected again; rounded
// up, a reset is never read as sooner than it is, and a rejected
// request's reset, never 0, never reads 0. The reference's fixed windows
// report whole seconds too.
func resetSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 0)
}

func headerSize(key string, value []byte) int {
	return bytesSize(fieldKey, len(key)) + bytesSize(fieldValue, len(value))
}

// The helpers below leave out zero values, as proto3 does for scalars;
// submessages are written whenever they are set, even when empty. Signed
// values are converted to uint64 through int64, so that a negative int32
// takes ten bytes, as protobuf encodes it.

func varintSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func bytesSize(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendBytes[S string | []byte](b []byte, num protowire.Number, s S) []byte {
	if len(s) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func messageSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendMessage appends the tag and length of a submessage of n bytes.
func appendMessage(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}
