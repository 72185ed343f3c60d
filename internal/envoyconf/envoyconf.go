// Package envoyconf is test support: it checks the Envoy configurations
// we ship against Envoy's own protos and their validation rules, as
// go-control-plane carries them: no Envoy binary is needed. The extensions a configuration uses
// must be linked into the test binary (a blank import of their package),
// or their typed_config does not resolve.
package envoyconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// HTTPOptionsKey is the key of a cluster's HTTP protocol options.
const HTTPOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

// DecodeBootstrap decodes an Envoy bootstrap written in YAML as Envoy
// does: YAML to JSON, then the proto JSON mapping, rejecting unknown
// fields (also inside typed_config, naming the YAML line) and types it
// cannot resolve. Then it checks Envoy's validation constraints, inside
// every typed_config too.
func DecodeBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml to json: %w", err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, b); err != nil {
		// protojson places the error in the JSON; point at the YAML.
		if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
			for i, line := range strings.Split(string(data), "\n") {
				if k, _, ok := strings.Cut(strings.TrimLeft(line, " -{"), ":"); ok && k == m[1] {
					return nil, fmt.Errorf("decode bootstrap: line %d: %w", i+1, err)
				}
			}
		}
		return nil, fmt.Errorf("decode bootstrap: %w", err)
	}
	if err := Validate(b, "bootstrap"); err != nil {
		return nil, err
	}
	return b, nil
}

// Validate runs m's generated ValidateAll and that of every message packed
// in an Any below it, naming each failure by its path from path.
// ValidateAll alone stops at an Any: it would never look inside a
// typed_config.
func Validate(m proto.Message, path string) error {
	var errs []error
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	errs = append(errs, validateAnys(m.ProtoReflect(), path)...)
	return errors.Join(errs...)
}

func validateAnys(m protoreflect.Message, path string) []error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return []error{fmt.Errorf("%s: %w", path, err)}
		}
		if err := Validate(inner, path+"<"+string(inner.ProtoReflect().Descriptor().Name())+">"); err != nil {
			return []error{err}
		}
		return nil
	}
	var errs []error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				break
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateAnys(mv.Message(), fmt.Sprintf("%s[%s]", p, k.String()))...)
				return true
			})
		case fd.IsList():
			if fd.Message() == nil {
				break
			}
			for i := range v.List().Len() {
				errs = append(errs, validateAnys(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.Message() != nil:
			errs = append(errs, validateAnys(v.Message(), p)...)
		}
		return true
	})
	return errs
}

// SpeaksHTTP2 reports whether cluster c is configured for HTTP/2, which
// gRPC needs.
func SpeaksHTTP2(c *clusterv3.Cluster) (bool, error) {
	a, ok := c.GetTypedExtensionProtocolOptions()[HTTPOptionsKey]
	if !ok {
		return false, nil
	}
	o := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		return false, fmt.Errorf("cluster %q: %w", c.GetName(), err)
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil, nil
}
