package xds

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// A RateLimitConfig renders as the rule document that envoyproxy/ratelimit's
// rule files hold, built directly as YAML nodes (config.File.Root). Its
// fields are named as the proto's, so a YAML path in an error is also the
// path of the resource's field. Zero values are left out, as the proto
// leaves them unset, except domain, key and requests_per_unit, which rule
// files require or always carry.

// The field numbers of RateLimitDescriptor that a newer RateLimitConfig
// has and go-control-plane's ratelimit module v0.1.0 lacks: they arrive
// as unknown fields. They render as rule files write them, and mean what
// they mean there.
const (
	fieldQuotaMode protowire.Number = 7
	fieldMetadata  protowire.Number = 8
)

// resourceName is how messages name a pushed resource.
func resourceName(name string) string { return fmt.Sprintf("RateLimitConfig %q", name) }

// render turns a push's resources into rule documents, sorted by
// resource name: a snapshot cache sends them in map order, and the order
// of a domain's merged documents is the order of its wildcard rules. The
// error lists every resource that is not a RateLimitConfig, has a field
// the rule documents cannot say, or nests its descriptors deeper than
// rule files may; each problem is a *config.Error.
//
// Its cost is linear in the push's size: a document's nodes are built
// from the proto in one walk that stops at config.MaxDescriptorLevels, and
// a path is spelled out only for a message.
func render(resources []*anypb.Any) ([]config.File, error) {
	var (
		files []config.File
		errs  []error
	)
	for i, res := range resources {
		var cfg rlsconf.RateLimitConfig
		if err := anypb.UnmarshalTo(res, &cfg, proto.UnmarshalOptions{}); err != nil {
			errs = append(errs, &config.Error{File: fmt.Sprintf("resource %d", i), Msg: fmt.Sprintf("want a RateLimitConfig: %v", err)})
			continue
		}
		f, err := renderConfig(&cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, f)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

// renderConfig renders one RateLimitConfig as a rule document. The
// document's Data, which its checksum covers, is the resource's
// deterministic wire form.
func renderConfig(cfg *rlsconf.RateLimitConfig) (config.File, error) {
	r := renderer{file: resourceName(cfg.GetName()), shared: map[[2]string]*yaml.Node{}}
	r.unknown(cfg, nil, "")
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	r.set(root, "domain", str(cfg.GetDomain()))
	if ds := cfg.GetDescriptors(); len(ds) > 0 {
		r.set(root, "descriptors", r.descriptors(ds, nil, "descriptors", 1))
	}
	if len(r.errs) > 0 {
		return config.File{}, errors.Join(r.errs...)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		return config.File{}, &config.Error{File: r.file, Msg: fmt.Sprintf("marshal: %v", err)}
	}
	return config.File{Name: r.file, Data: data, Root: root}, nil
}

// renderer renders one resource, collecting the problems that the rule
// document cannot carry to the parser.
type renderer struct {
	file string
	errs []error
	// shared holds one node for each field name and for each of the
	// few values that repeat (units, numbers, true), used wherever they
	// occur: the parser only reads nodes, and a descriptor then costs
	// half the nodes.
	shared map[[2]string]*yaml.Node
}

// scalar returns the shared scalar node of tag and value.
func (r *renderer) scalar(tag, value string) *yaml.Node {
	k := [2]string{tag, value}
	n := r.shared[k]
	if n == nil {
		n = scalar(tag, value)
		r.shared[k] = n
	}
	return n
}

// set adds the field key with value to the mapping m.
func (r *renderer) set(m *yaml.Node, key string, value *yaml.Node) {
	m.Content = append(m.Content, r.scalar("!!str", key), value)
}

// place is where a field is, as its parent and its own name or index.
// Paths are spelled out only for messages: spelling every descriptor's
// would cost bytes in proportion to its depth.
type place struct {
	up    *place
	field string // "" for an item of a list
	index int
}

// path spells out the path of the field named field (an index if "")
// inside p.
func (p *place) path(field string) string {
	var parts []string
	if field != "" {
		parts = append(parts, field)
	}
	for ; p != nil; p = p.up {
		if p.field == "" {
			parts = append(parts, "["+strconv.Itoa(p.index)+"]")
			continue
		}
		parts = append(parts, p.field)
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		if b.Len() > 0 && !strings.HasPrefix(parts[i], "[") {
			b.WriteByte('.')
		}
		b.WriteString(parts[i])
	}
	return b.String()
}

// descriptors renders the descriptors field of at, a list at descriptor
// level, 1 for the top.
func (r *renderer) descriptors(pbs []*rlsconf.RateLimitDescriptor, at *place, field string, level int) *yaml.Node {
	list := &place{up: at, field: field}
	if level > config.MaxDescriptorLevels {
		// Stop here: the rest of the tree is not walked, so a push
		// nested thousands deep costs no more than one 32 deep.
		r.errorf(&place{up: list}, "", "descriptors nested more than %d levels deep", config.MaxDescriptorLevels)
		return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	out := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: make([]*yaml.Node, 0, len(pbs))}
	for i, pb := range pbs {
		out.Content = append(out.Content, r.descriptor(pb, &place{up: list, index: i}, level))
	}
	return out
}

func (r *renderer) descriptor(pb *rlsconf.RateLimitDescriptor, at *place, level int) *yaml.Node {
	d := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, 6)}
	r.set(d, "key", str(pb.GetKey()))
	if v := pb.GetValue(); v != "" {
		r.set(d, "value", str(v))
	}
	if rl := pb.GetRateLimit(); rl != nil {
		r.set(d, "rate_limit", r.rateLimit(rl, &place{up: at, field: "rate_limit"}))
	}
	if ds := pb.GetDescriptors(); len(ds) > 0 {
		r.set(d, "descriptors", r.descriptors(ds, at, "descriptors", level+1))
	}
	if pb.GetShadowMode() {
		r.set(d, "shadow_mode", r.scalar("!!bool", "true"))
	}
	if pb.GetDetailedMetric() {
		r.set(d, "detailed_metric", r.scalar("!!bool", "true"))
	}
	var quota bool
	var meta *yaml.Node
	for _, f := range r.unknown(pb, at, "", fieldQuotaMode, fieldMetadata) {
		switch f.num {
		case fieldQuotaMode:
			v, n := protowire.ConsumeVarint(f.value)
			if f.typ != protowire.VarintType || n < 0 {
				r.errorf(at, "quota_mode", "want a bool")
				continue
			}
			quota = v != 0
		case fieldMetadata:
			var s structpb.Struct
			if f.typ != protowire.BytesType || proto.Unmarshal(f.value, &s) != nil {
				r.errorf(at, "metadata", "want a google.protobuf.Struct")
				continue
			}
			if len(s.GetFields()) > 0 {
				meta = structNode(&s)
			}
		}
	}
	if quota {
		r.set(d, "quota_mode", r.scalar("!!bool", "true"))
	}
	if meta != nil {
		r.set(d, "metadata", meta)
	}
	return d
}

func (r *renderer) rateLimit(pb *rlsconf.RateLimitPolicy, at *place) *yaml.Node {
	r.unknown(pb, at, "")
	l := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, 4)}
	if u := unitName(pb.GetUnit()); u != "" {
		r.set(l, "unit", r.scalar("!!str", u))
	}
	r.set(l, "requests_per_unit", r.scalar("!!int", strconv.FormatUint(uint64(pb.GetRequestsPerUnit()), 10)))
	if pb.GetUnlimited() {
		r.set(l, "unlimited", r.scalar("!!bool", "true"))
	}
	if n := pb.GetName(); n != "" {
		r.set(l, "name", str(n))
	}
	if rps := pb.GetReplaces(); len(rps) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		replaces := &place{up: at, field: "replaces"}
		for i, rp := range rps {
			r.unknown(rp, &place{up: replaces, index: i}, "")
			item := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			r.set(item, "name", str(rp.GetName()))
			list.Content = append(list.Content, item)
		}
		r.set(l, "replaces", list)
	}
	return l
}

// structNode renders a google.protobuf.Struct as the mapping a rule
// file's metadata holds. Numbers are floats, as the Struct holds them.
func structNode(s *structpb.Struct) *yaml.Node {
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: make([]*yaml.Node, 0, 2*len(keys))}
	for _, k := range keys {
		m.Content = append(m.Content, str(k), valueNode(s.GetFields()[k]))
	}
	return m
}

func valueNode(v *structpb.Value) *yaml.Node {
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return scalar("!!float", formatFloat(x.NumberValue))
	case *structpb.Value_StringValue:
		return str(x.StringValue)
	case *structpb.Value_BoolValue:
		return boolean(x.BoolValue)
	case *structpb.Value_StructValue:
		return structNode(x.StructValue)
	case *structpb.Value_ListValue:
		l := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, item := range x.ListValue.GetValues() {
			l.Content = append(l.Content, valueNode(item))
		}
		return l
	}
	return scalar("!!null", "null")
}

// formatFloat writes f as YAML does.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func str(s string) *yaml.Node { return scalar("!!str", s) }

func boolean(b bool) *yaml.Node { return scalar("!!bool", strconv.FormatBool(b)) }

// unitName is the rule files' name of a RateLimitUnit. The enum's numbers
// are Envoy's, and limits.Unit's, so the units that ratelimit module
// v0.1.0 does not name (WEEK, MONTH, YEAR) convert too. UNKNOWN, the
// proto's unset value, renders as no unit, which the parser requires
// unless the limit is unlimited; a number no unit has renders as itself,
// which the parser rejects as an unknown unit.
func unitName(u rlsconf.RateLimitUnit) string {
	if u == rlsconf.RateLimitUnit_UNKNOWN {
		return ""
	}
	if lu := limits.Unit(u); lu.Duration() > 0 {
		return lu.String()
	}
	return strconv.Itoa(int(u))
}

// field is one unknown field of a message.
type field struct {
	num   protowire.Number
	typ   protowire.Type
	value []byte // the field's value, without its tag
}

// unknown returns m's unknown fields numbered as one of known, and
// records every other one as a problem: a field this build does not know
// may change what a rule means, so it is refused, not ignored.
func (r *renderer) unknown(m proto.Message, at *place, name string, known ...protowire.Number) []field {
	b := m.ProtoReflect().GetUnknown()
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			r.errorf(at, name, "malformed unknown field: %v", protowire.ParseError(n))
			return out
		}
		b = b[n:]
		vn := protowire.ConsumeFieldValue(num, typ, b)
		if vn < 0 {
			r.errorf(at, name, "malformed unknown field %d: %v", num, protowire.ParseError(vn))
			return out
		}
		v := b[:vn]
		b = b[vn:]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if isOneOf(num, known) {
			out = append(out, field{num: num, typ: typ, value: v})
			continue
		}
		r.errorf(at, name, "field number %d of %s is unknown to ratelimit-sidecar; refusing it rather than ignoring what it may mean", num, messageName(m))
	}
	return out
}

// errorf records a problem with the field named field (the whole of at
// if "") inside at.
func (r *renderer) errorf(at *place, field, format string, args ...any) {
	r.errs = append(r.errs, &config.Error{File: r.file, Path: at.path(field), Msg: fmt.Sprintf(format, args...)})
}

func isOneOf(n protowire.Number, set []protowire.Number) bool {
	for _, s := range set {
		if n == s {
			return true
		}
	}
	return false
}

func messageName(m proto.Message) protoreflect.Name { return m.ProtoReflect().Descriptor().Name() }
