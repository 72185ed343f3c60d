package envoy

import (
	"strconv"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// HeaderNames renames the headers of HeadersDraft03, as
// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and
// LIMIT_RESET_HEADER do. A zero field keeps the standard name.
type HeaderNames struct {
	Limit, Remaining, Reset string
}

func (n HeaderNames) zero() bool { return n == HeaderNames{} }

// rename renames resp's draft 03 headers.
func (n HeaderNames) rename(resp *rlsv3.RateLimitResponse) {
	for _, h := range resp.ResponseHeadersToAdd {
		switch {
		case h.Key == headerLimit && n.Limit != "":
			h.Key = n.Limit
		case h.Key == headerRemaining && n.Remaining != "":
			h.Key = n.Remaining
		case h.Key == headerReset && n.Reset != "":
			h.Key = n.Reset
		}
	}
}

// message reports whether responses must be built as messages rather
// than encoded straight from the decision (see encode.go): for the
// options that only the message path implements.
func (o *Options) message() bool {
	return o.DynamicMetadata || (o.Headers == HeadersDraft03 && !o.HeaderNames.zero())
}

// shadow applies Options.Shadow to a decision: a request over its limit
// is OK overall, and its statuses stay as they are.
func (o *Options) shadow(d *limits.Decision) {
	if o.Shadow && d.Code == limits.OverLimit {
		d.Code = limits.OK
	}
}

// metadata is the dynamic metadata of envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA for req, decided as d: its domain; per
// descriptor, its entries as "key=value", its limit override as
// "requests_per_unit:<n> unit:<UNIT>" and its hits_addend, when set; the
// request's hits_addend when it is not 0; and under "metadata" the rule
// metadata of its descriptors that passed (see ruleMetadata), if any.
func metadata(req *limits.Request, d *limits.Decision) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		entries := make([]*structpb.Value, len(d.Entries))
		for i, e := range d.Entries {
			entries[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if o := d.Override; o != nil {
			f["limit"] = structpb.NewStringValue("requests_per_unit:" + strconv.FormatUint(o.Requests, 10) + " unit:" + strings.ToUpper(o.Unit.String()))
		}
		if d.HasHits {
			f["hitsAddend"] = structpb.NewNumberValue(float64(d.Hits))
		}
		if d.Negative {
			f["isNegativeHits"] = structpb.NewBoolValue(true)
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	f := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if req.Hits != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(req.Hits))
	}
	if m := ruleMetadata(d); m != nil {
		f["metadata"] = structpb.NewStructValue(m)
	}
	return &structpb.Struct{Fields: f}
}

// ruleMetadata merges the metadata (limits.Rule.Metadata) of the rules
// that d's descriptors matched, in request order, as the reference
// merges it: only descriptors whose limits were checked (not replaced,
// not unlimited, no override) and none of which, but shadow limits, was
// over; a key already set keeps its first value, except that two
// mappings merge key by key. Nil when there is nothing to merge. Every
// value is built afresh, so merging never writes into a rule's metadata.
func ruleMetadata(d *limits.Decision) *structpb.Struct {
	var out *structpb.Struct
	for j := range d.Checks() {
		i := d.Descriptor(j)
		if j > 0 && d.Descriptor(j-1) == i {
			continue // a descriptor's checks are consecutive
		}
		st := &d.Statuses[i]
		if st.Over || st.Rule == nil || st.Rule.Metadata == nil {
			continue
		}
		m, err := structpb.NewStruct(st.Rule.Metadata)
		if err != nil {
			continue // cannot happen: rule files hold only what a Struct holds
		}
		if out == nil {
			out = m
			continue
		}
		mergeStruct(out, m)
	}
	return out
}

// mergeStruct adds to dst the fields of src that dst lacks, and merges
// the fields that are mappings in both.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		old, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case old.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(old.GetStructValue(), v.GetStructValue())
		}
	}
}
