package main

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
// server takes messages up to rlqsMaxMessageBytes, pkg/envoy's codec
// refuses an RLS request over envoy.MaxRequestBytes with
// RESOURCE_EXHAUSTED, and sizedCodec, beneath it, every other message
// over maxMessageBytes, before decoding it.
const (
	// rlqsMaxMessageBytes bounds an RLQS usage report's bytes: 16 MiB
	// takes rlqsMaxReportBuckets buckets with ids of over 300 bytes (a
	// bucket costs about 16 bytes of framing beside its id).
	rlqsMaxMessageBytes = 16 << 20
	// rlqsMaxReportBuckets bounds the buckets of one report, counted
	// before it is decoded: a decoded bucket costs about 465 bytes
	// however short its id (100,000 decoded to 44 MiB), so the bytes
	// alone would let a report of short ids decode to hundreds of MiB.
	// 50,000 is five times the buckets one stream holds
	// (--rlqs-max-buckets), and decodes to about 22 MiB.
	rlqsMaxReportBuckets = 50_000
)

// sizedCodec is grpc-go's proto codec with the bounds above.
type sizedCodec struct{ next encoding.CodecV2 }

func newSizedCodec() sizedCodec { return sizedCodec{next: encoding.GetCodecV2(protocodec.Name)} }

func (c sizedCodec) Name() string { return c.next.Name() }

func (c sizedCodec) Marshal(v any) (mem.BufferSlice, error) { return c.next.Marshal(v) }

func (c sizedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rlqspb.RateLimitQuotaUsageReports)
	if !ok {
		if n := data.Len(); n > maxMessageBytes {
			return fmt.Errorf("message of %d bytes: larger than the %d this method takes", n, maxMessageBytes)
		}
		return c.next.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if n, err := countField(b, reportBucketsField); err != nil {
		return err
	} else if n > rlqsMaxReportBuckets {
		return fmt.Errorf("bucket_quota_usages: %d buckets in one report, more than %d", n, rlqsMaxReportBuckets)
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
