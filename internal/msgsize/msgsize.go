// Package msgsize bounds the gRPC messages the sidecar's server decodes,
// per method, where grpc-go bounds them per server: Codec refuses an RLS
// request or any other message over MaxBytes, and an RLQS report of more
// than RLQSMaxReportBuckets buckets, before decoding it; the server takes
// messages up to RLQSMaxBytes (grpc.MaxRecvMsgSize).
package msgsize

import (
	"fmt"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Envoy's rate_limit_quota filter sends every bucket it holds in one
// message at each report, so an RLQS report may be far larger than any
// other request. grpc-go bounds messages per server, not per method: the
// server takes messages up to RLQSMaxBytes, pkg/envoy's codec refuses an
// RLS request over envoy.MaxRequestBytes with RESOURCE_EXHAUSTED, and
// Codec, beneath it, every other message over MaxBytes, before decoding
// it.
const (
	// MaxBytes bounds a gRPC request message as pkg/envoy bounds a POST
	// /json body. A request is smaller in protobuf than in JSON, so gRPC
	// takes every request /json takes.
	MaxBytes = 1 << 20
	// RLQSMaxBytes bounds an RLQS usage report's bytes: 16 MiB
	// takes RLQSMaxReportBuckets buckets with ids of over 300 bytes (a
	// bucket costs about 16 bytes of framing beside its id).
	RLQSMaxBytes = 16 << 20
	// RLQSMaxReportBuckets bounds the buckets of one report, counted
	// before it is decoded: a decoded bucket costs about 465 bytes
	// however short its id (100,000 decoded to 44 MiB), so the bytes
	// alone would let a report of short ids decode to hundreds of MiB.
	// 50,000 is five times the buckets one stream holds
	// (--rlqs-max-buckets), and decodes to about 22 MiB.
	RLQSMaxReportBuckets = 50_000
)

// Codec is grpc-go's proto codec with the bounds above.
type Codec struct{ next encoding.CodecV2 }

// NewCodec returns the codec.
func NewCodec() Codec { return Codec{next: encoding.GetCodecV2(protocodec.Name)} }

func (c Codec) Name() string { return c.next.Name() }

func (c Codec) Marshal(v any) (mem.BufferSlice, error) { return c.next.Marshal(v) }

func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rlqspb.RateLimitQuotaUsageReports)
	if !ok {
		if n := data.Len(); n > MaxBytes {
			return fmt.Errorf("message of %d bytes: larger than the %d this method takes", n, MaxBytes)
		}
		return c.next.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if n, err := countField(b, reportBucketsField); err != nil {
		return err
	} else if n > RLQSMaxReportBuckets {
		return fmt.Errorf("bucket_quota_usages: %d buckets in one report, more than %d", n, RLQSMaxReportBuckets)
	}
	return proto.Unmarshal(b, r)
}

// reportBucketsField is bucket_quota_usages' field number.
var reportBucketsField = (&rlqspb.RateLimitQuotaUsageReports{}).ProtoReflect().Descriptor().
	Fields().ByName("bucket_quota_usages").Number()

// countField counts the top-level fields numbered f in the wire-format
// message b, without decoding them.
func countField(b []byte, f protowire.Number) (int, error) {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if num == f {
			n++
		}
	}
	return n, nil
}
