package bounds

import (
	"fmt"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
	// RLQSMaxReportEntries bounds the entries of all the bucket ids of
	// one report, counted before it is decoded: a decoded id of up to 8
	// entries costs about 470 bytes with its bucket, and each entry past
	// 8 about 70 more, besides its strings. 100,000 is two entries a
	// bucket at RLQSMaxReportBuckets, or ten for every bucket a stream
	// holds (--rlqs-max-buckets); such a report decodes to at most about
	// 24 MiB plus its strings (at most its bytes).
	RLQSMaxReportEntries = 100_000
)

// Bounds on the bytes of messages on their way in (Messages).
const (
	// ConnBytes bounds one connection's messages longer than Window
	// while they arrive: an RLQS report of RLQSMaxBytes and an RLS
	// request of MaxBytes. Envoy's requests are under a kilobyte, and
	// it reports on one stream a worker.
	ConnBytes = RLQSMaxBytes + MaxBytes
	// TotalBytes bounds all connections' messages longer than Window
	// while they arrive: four RLQS reports of RLQSMaxBytes.
	TotalBytes = 4 * RLQSMaxBytes
	// MessageTimeout bounds how long a message may take to arrive whole
	// from its prefix. Envoy writes a message at once; the longest wait
	// a real client has is for its window, while the handler finishes
	// the stream's previous message (an RLQS report is handled in well
	// under a second).
	MessageTimeout = 10 * time.Second
	// BlockedMessageTimeout bounds how long a message may wait, whole
	// window spent, for the handler to read it. An RLQS report is
	// handled in well under a second; a handler that reads nothing for
	// a minute is not serving its stream.
	BlockedMessageTimeout = time.Minute
)

// Codec is grpc-go's proto codec with the bounds above, and a bucket id
// of an RLQS report held to IDSlack times what an RLS descriptor may
// hold.
type Codec struct {
	next encoding.CodecV2
	id   IDBounds
}

// IDBounds are the RLS path's bounds on a descriptor (--max-entries,
// --max-value-bytes), which an RLQS bucket id is held to. Zero fields
// mean 32 and 4096, those flags' defaults. A report's id past them is
// pkg/rlqs's to answer, with its domain's failure mode, bucket by
// bucket; Codec refuses the whole report, before decoding it, when an
// id is past IDSlack times them, as no Envoy sends and as would cost
// what the bounds do not admit to decode and to echo back.
type IDBounds struct {
	Entries    int // entries of one id
	EntryBytes int // bytes of each key and of each value
}

// IDSlack is how far past IDBounds a bucket id may go before Codec
// refuses its report.
const IDSlack = 4

// NewCodec returns the codec.
func NewCodec(id IDBounds) Codec {
	if id.Entries <= 0 {
		id.Entries = 32
	}
	if id.EntryBytes <= 0 {
		id.EntryBytes = 4096
	}
	id.Entries *= IDSlack
	id.EntryBytes *= IDSlack
	return Codec{next: encoding.GetCodecV2(protocodec.Name), id: id}
}

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
	if err := c.checkReport(b); err != nil {
		return err
	}
	return proto.Unmarshal(b, r)
}

// Field numbers of the RLQS report, its buckets and their ids.
var (
	reportBucketsField = fieldNumber(&rlqspb.RateLimitQuotaUsageReports{}, "bucket_quota_usages")
	usageIDField       = fieldNumber(&rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{}, "bucket_id")
	idEntriesField     = fieldNumber(&rlqspb.BucketId{}, "bucket")
)

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// checkReport walks the wire-format report b without decoding it, and
// refuses one of more than RLQSMaxReportBuckets buckets or
// RLQSMaxReportEntries id entries, or with an id past c.id (IDSlack
// times the IDBounds it was made with). What it
// counts is what decoding would build: every occurrence of a field,
// since a repeated one is merged into the same message.
func (c Codec) checkReport(b []byte) error {
	buckets, entries := 0, 0
	err := walk(b, reportBucketsField, func(usage []byte) error {
		if buckets++; buckets > RLQSMaxReportBuckets {
			return fmt.Errorf("bucket_quota_usages: more than %d buckets in one report", RLQSMaxReportBuckets)
		}
		n := 0
		err := walk(usage, usageIDField, func(id []byte) error {
			return walk(id, idEntriesField, func(entry []byte) error {
				if n++; n > c.id.Entries {
					return fmt.Errorf("bucket_quota_usages[%d].bucket_id: more than %d entries", buckets-1, c.id.Entries)
				}
				if entries++; entries > RLQSMaxReportEntries {
					return fmt.Errorf("bucket_quota_usages: more than %d bucket id entries in one report", RLQSMaxReportEntries)
				}
				return walk(entry, 0, func(kv []byte) error {
					if len(kv) > c.id.EntryBytes {
						return fmt.Errorf("bucket_quota_usages[%d].bucket_id: a key or value of %d bytes, more than %d", buckets-1, len(kv), c.id.EntryBytes)
					}
					return nil
				})
			})
		})
		return err
	})
	return err
}

// walk calls f with the bytes of each length-delimited field numbered f
// of the wire-format message b (of every length-delimited field, when
// num is 0), without decoding them, and skips every other field.
func walk(b []byte, num protowire.Number, f func([]byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if typ == protowire.BytesType && (num == 0 || n == num) {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			if err := f(v); err != nil {
				return err
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil
}
