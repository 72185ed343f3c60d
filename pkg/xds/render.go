package xds

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

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

// The rule document a RateLimitConfig renders as: the YAML that
// envoyproxy/ratelimit's rule files hold. Its fields are named as the
// proto's, so a YAML path in an error is also the path of the resource's
// field. Zero values are left out, as the proto leaves them unset, except
// domain and key, which rule files require.
type ruleDoc struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors,omitempty"`
}

type descriptor struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value,omitempty"`
	RateLimit      *rateLimit     `yaml:"rate_limit,omitempty"`
	Descriptors    []descriptor   `yaml:"descriptors,omitempty"`
	ShadowMode     bool           `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool           `yaml:"detailed_metric,omitempty"`
	QuotaMode      bool           `yaml:"quota_mode,omitempty"`
	Metadata       map[string]any `yaml:"metadata,omitempty"`
}

type rateLimit struct {
	Unit            string    `yaml:"unit,omitempty"`
	RequestsPerUnit uint32    `yaml:"requests_per_unit"`
	Unlimited       bool      `yaml:"unlimited,omitempty"`
	Name            string    `yaml:"name,omitempty"`
	Replaces        []replace `yaml:"replaces,omitempty"`
}

type replace struct {
	Name string `yaml:"name"`
}

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
// error lists every resource that is not a RateLimitConfig or has a field
// the rule documents cannot say; each problem is a *config.Error.
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

// renderConfig renders one RateLimitConfig as a rule document.
func renderConfig(cfg *rlsconf.RateLimitConfig) (config.File, error) {
	r := renderer{file: resourceName(cfg.GetName())}
	r.unknown(cfg, "")
	doc := ruleDoc{Domain: cfg.GetDomain(), Descriptors: r.descriptors(cfg.GetDescriptors(), "descriptors")}
	if len(r.errs) > 0 {
		return config.File{}, errors.Join(r.errs...)
	}
	data, err := yaml.Marshal(&doc)
	if err != nil {
		return config.File{}, &config.Error{File: r.file, Msg: fmt.Sprintf("render as YAML: %v", err)}
	}
	return config.File{Name: r.file, Data: data}, nil
}

// renderer renders one resource, collecting the problems that the rule
// document cannot carry to the parser.
type renderer struct {
	file string
	errs []error
}

func (r *renderer) descriptors(pbs []*rlsconf.RateLimitDescriptor, path string) []descriptor {
	var out []descriptor
	for i, pb := range pbs {
		p := path + "[" + strconv.Itoa(i) + "]"
		d := descriptor{
			Key:            pb.GetKey(),
			Value:          pb.GetValue(),
			RateLimit:      r.rateLimit(pb.GetRateLimit(), p+".rate_limit"),
			Descriptors:    r.descriptors(pb.GetDescriptors(), p+".descriptors"),
			ShadowMode:     pb.GetShadowMode(),
			DetailedMetric: pb.GetDetailedMetric(),
		}
		for _, f := range r.unknown(pb, p, fieldQuotaMode, fieldMetadata) {
			switch f.num {
			case fieldQuotaMode:
				v, n := protowire.ConsumeVarint(f.value)
				if f.typ != protowire.VarintType || n < 0 {
					r.errorf(p+".quota_mode", "want a bool")
					continue
				}
				d.QuotaMode = v != 0
			case fieldMetadata:
				var s structpb.Struct
				if f.typ != protowire.BytesType || proto.Unmarshal(f.value, &s) != nil {
					r.errorf(p+".metadata", "want a google.protobuf.Struct")
					continue
				}
				if len(s.GetFields()) > 0 {
					d.Metadata = s.AsMap()
				}
			}
		}
		out = append(out, d)
	}
	return out
}

func (r *renderer) rateLimit(pb *rlsconf.RateLimitPolicy, path string) *rateLimit {
	if pb == nil {
		return nil
	}
	r.unknown(pb, path)
	l := &rateLimit{
		RequestsPerUnit: pb.GetRequestsPerUnit(),
		Unlimited:       pb.GetUnlimited(),
		Name:            pb.GetName(),
		Unit:            unitName(pb.GetUnit()),
	}
	for i, rp := range pb.GetReplaces() {
		r.unknown(rp, path+".replaces["+strconv.Itoa(i)+"]")
		l.Replaces = append(l.Replaces, replace{Name: rp.GetName()})
	}
	return l
}

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
func (r *renderer) unknown(m proto.Message, path string, known ...protowire.Number) []field {
	b := m.ProtoReflect().GetUnknown()
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			r.errorf(path, "malformed unknown field: %v", protowire.ParseError(n))
			return out
		}
		b = b[n:]
		vn := protowire.ConsumeFieldValue(num, typ, b)
		if vn < 0 {
			r.errorf(path, "malformed unknown field %d: %v", num, protowire.ParseError(vn))
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
		r.errorf(path, "field number %d of %s is unknown to ratelimit-sidecar; refusing it rather than ignoring what it may mean", num, messageName(m))
	}
	return out
}

func (r *renderer) errorf(path, format string, args ...any) {
	r.errs = append(r.errs, &config.Error{File: r.file, Path: path, Msg: fmt.Sprintf(format, args...)})
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
