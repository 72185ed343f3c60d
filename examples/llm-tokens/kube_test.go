package llmexample_test

// The Kubernetes resources of the example are checked against small local
// structs that mirror the fields of the API types they were written from
// (named in each file's header), decoded strictly so that a misspelled
// field fails, and against what Envoy Gateway renders for them.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"
)

// kubeDocs decodes each YAML document of data, the file path, strictly
// into the value that pick returns for its kind: a field the value's type
// does not have is an error, and so is a kind for which pick returns nil.
func kubeDocs(path string, data []byte, pick func(kind string) any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var head struct {
			Kind string `yaml:"kind"`
		}
		if err := n.Decode(&head); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		v := pick(head.Kind)
		if v == nil {
			return fmt.Errorf("%s: document %d: unexpected kind %q", path, i, head.Kind)
		}
		// Node.Decode does not refuse unknown fields; a Decoder does.
		raw, err := yaml.Marshal(&n)
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		strict := yaml.NewDecoder(bytes.NewReader(raw))
		strict.KnownFields(true)
		if err := strict.Decode(v); err != nil {
			return fmt.Errorf("%s: document %d (%s): %w", path, i, head.Kind, err)
		}
	}
}

// The fields of Kubernetes resources that the example uses, named as the
// API types name them in JSON: Envoy Gateway v1.9.0 api/v1alpha1
// (backendtrafficpolicy_types.go, policy_helpers.go, ratelimit_types.go)
// and Envoy AI Gateway v1.1.0 api/v1beta1 (ai_gateway_route.go,
// shared_types.go).

type objectMeta struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
}

type targetRef struct {
	Group string `yaml:"group"`
	Kind  string `yaml:"kind"`
	Name  string `yaml:"name"`
}

type backendTrafficPolicy struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		TargetRefs []targetRef `yaml:"targetRefs"`
		RateLimit  struct {
			Type   string `yaml:"type"` // deprecated since v1.7
			Global struct {
				Rules []rateLimitRule `yaml:"rules"`
			} `yaml:"global"`
		} `yaml:"rateLimit"`
	} `yaml:"spec"`
}

type rateLimitRule struct {
	ClientSelectors []struct {
		Headers []headerMatch `yaml:"headers"`
	} `yaml:"clientSelectors"`
	Limit struct {
		Requests uint64 `yaml:"requests"`
		Unit     string `yaml:"unit"`
	} `yaml:"limit"`
	Cost *struct {
		Request  *costSpecifier `yaml:"request"`
		Response *costSpecifier `yaml:"response"`
	} `yaml:"cost"`
}

type headerMatch struct {
	Name  string  `yaml:"name"`
	Type  string  `yaml:"type"`
	Value *string `yaml:"value"`
}

type costSpecifier struct {
	From     string  `yaml:"from"`
	Number   *uint64 `yaml:"number"`
	Metadata *struct {
		Namespace string `yaml:"namespace"`
		Key       string `yaml:"key"`
	} `yaml:"metadata"`
}

type aiGatewayRoute struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		ParentRefs []targetRef `yaml:"parentRefs"`
		Rules      []struct {
			Matches []struct {
				Headers []struct {
					Type  string `yaml:"type"`
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"headers"`
			} `yaml:"matches"`
			BackendRefs []struct {
				Name string `yaml:"name"`
			} `yaml:"backendRefs"`
		} `yaml:"rules"`
		LLMRequestCosts []struct {
			MetadataKey string `yaml:"metadataKey"`
			Type        string `yaml:"type"`
			CEL         string `yaml:"cel"`
		} `yaml:"llmRequestCosts"`
	} `yaml:"spec"`
}

// The enums the example's fields take their values from.
var (
	rateLimitUnits = []string{"Second", "Minute", "Hour", "Day", "Month", "Year"}
	costTypes      = []string{"OutputToken", "InputToken", "CachedInputToken", "CacheCreationInputToken", "TotalToken", "ReasoningToken", "CEL"}
)

// checkRule checks one rule as Envoy Gateway's CRD validation would (the
// unit, one of number or metadata), and that it is a token budget: one
// Distinct header, a check on the request path and a charge from AI
// Gateway's metadata at stream end. It returns the header and the
// metadata key.
func checkRule(where string, r rateLimitRule) (header, key string, err error) {
	var errs []error
	if !slices.Contains(rateLimitUnits, r.Limit.Unit) {
		errs = append(errs, fmt.Errorf("%s: limit.unit %q is not one of %v", where, r.Limit.Unit, rateLimitUnits))
	}
	if len(r.ClientSelectors) != 1 || len(r.ClientSelectors[0].Headers) != 1 {
		errs = append(errs, fmt.Errorf("%s: want one client selector with one header", where))
	} else {
		h := r.ClientSelectors[0].Headers[0]
		header = h.Name
		if h.Type != "Distinct" || h.Value != nil {
			errs = append(errs, fmt.Errorf("%s: header %q: want type Distinct and no value, a budget per header value", where, h.Name))
		}
	}
	switch c := r.Cost; {
	case c == nil || c.Request == nil || c.Response == nil:
		errs = append(errs, fmt.Errorf("%s: want cost.request and cost.response", where))
	default:
		for _, s := range []struct {
			name string
			c    *costSpecifier
		}{{"request", c.Request}, {"response", c.Response}} {
			if s.c.Number != nil && s.c.Metadata != nil {
				errs = append(errs, fmt.Errorf("%s: cost.%s: only one of number or metadata can be specified", where, s.name))
			}
		}
		if c.Request.From != "Number" || c.Request.Number == nil || *c.Request.Number != 0 {
			errs = append(errs, fmt.Errorf("%s: cost.request: want from Number, number 0: check the budget, charge nothing", where))
		}
		if c.Response.From != "Metadata" || c.Response.Metadata == nil || c.Response.Metadata.Namespace != aiGatewayNamespace {
			errs = append(errs, fmt.Errorf("%s: cost.response: want from Metadata in namespace %s", where, aiGatewayNamespace))
		} else {
			key = c.Response.Metadata.Key
		}
	}
	return header, key, errors.Join(errs...)
}

// decodePolicy decodes data, the file path, which must hold one
// BackendTrafficPolicy and nothing else.
func decodePolicy(path string, data []byte) (backendTrafficPolicy, error) {
	var p backendTrafficPolicy
	n := 0
	err := kubeDocs(path, data, func(kind string) any {
		if kind != "BackendTrafficPolicy" {
			return nil
		}
		n++
		return &p
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("%s: %d BackendTrafficPolicy documents, want 1", path, n)
	}
	return p, err
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBackendTrafficPolicy checks backendtrafficpolicy.yaml, and that
// ratelimitconfig.yaml and routes.yaml say what Envoy Gateway renders
// for it: the limit on the tenant's descriptor, the header that fills
// it, a request-time hits_addend of cost.request's number and a
// stream-done one that reads cost.response's metadata.
func TestBackendTrafficPolicy(t *testing.T) {
	p, err := decodePolicy("backendtrafficpolicy.yaml", readFile(t, "backendtrafficpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "gateway.envoyproxy.io/v1alpha1" {
		t.Errorf("apiVersion %q", p.APIVersion)
	}
	if want := []targetRef{{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "llm"}}; !cmp.Equal(p.Spec.TargetRefs, want) {
		t.Errorf("targetRefs %+v, want %+v (the route whose names ratelimitconfig.yaml and routes.yaml use)", p.Spec.TargetRefs, want)
	}
	rules := p.Spec.RateLimit.Global.Rules
	if len(rules) != 1 {
		t.Fatalf("%d rules, want 1", len(rules))
	}
	rule := rules[0]
	header, key, err := checkRule("rules[0]", rule)
	if err != nil {
		t.Fatal(err)
	}
	if header != "x-tenant-id" || key != "llm_total_token" {
		t.Errorf("budget per %q charged from %q, want per x-tenant-id from llm_total_token", header, key)
	}

	// What Envoy Gateway renders for rule 0 with one Distinct header.
	want := &rlsconf.RateLimitConfig{
		Name:   domain,
		Domain: domain,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:   routeKey,
			Value: routeKey,
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: tenantKey,
				RateLimit: &rlsconf.RateLimitPolicy{
					Unit:            rlsconf.RateLimitUnit(rlsconf.RateLimitUnit_value[strings.ToUpper(rule.Limit.Unit)]),
					RequestsPerUnit: uint32(rule.Limit.Requests),
				},
			}},
		}},
	}
	if got := readRateLimitConfig(t); !proto.Equal(got, want) {
		t.Errorf("ratelimitconfig.yaml is not what Envoy Gateway renders for the policy:\n got %v\nwant %v", got, want)
	}

	actions := []*routev3.RateLimit_Action{
		{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{
			DescriptorKey: routeKey, DescriptorValue: routeKey,
		}}},
		{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
			HeaderName: header, DescriptorKey: tenantKey,
		}}},
	}
	wantLimits := []*routev3.RateLimit{
		{Actions: actions, HitsAddend: &routev3.RateLimit_HitsAddend{Number: wrapperspb.UInt64(*rule.Cost.Request.Number)}},
		{Actions: actions, ApplyOnStreamDone: true, HitsAddend: &routev3.RateLimit_HitsAddend{
			Format: fmt.Sprintf("%%DYNAMIC_METADATA(%s:%s)%%", rule.Cost.Response.Metadata.Namespace, rule.Cost.Response.Metadata.Key),
		}},
	}
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 || routes[0].name != routeKey {
		t.Fatalf("routes.yaml: want one rate-limited route, %q", routeKey)
	}
	got := &rlfilterv3.RateLimitPerRoute{Domain: routes[0].cfg.GetDomain(), RateLimits: routes[0].cfg.GetRateLimits()}
	if w := (&rlfilterv3.RateLimitPerRoute{Domain: domain, RateLimits: wantLimits}); !proto.Equal(got, w) {
		t.Errorf("routes.yaml is not what Envoy Gateway renders for the policy:\n got %v\nwant %v", got, w)
	}
}

// TestAIGateway checks aigateway.yaml: the route's llmRequestCosts are
// of known types, and each rule of the policy is a token budget per user
// charged from a key the route writes, with the limits of AI Gateway's
// usage-based rate limiting example (examples/token_ratelimit).
func TestAIGateway(t *testing.T) {
	var (
		route   aiGatewayRoute
		p       backendTrafficPolicy
		nroutes int
		npols   int
	)
	err := kubeDocs("aigateway.yaml", readFile(t, "aigateway.yaml"), func(kind string) any {
		switch kind {
		case "AIGatewayRoute":
			nroutes++
			return &route
		case "BackendTrafficPolicy":
			npols++
			return &p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if nroutes != 1 || npols != 1 {
		t.Fatalf("aigateway.yaml: %d AIGatewayRoutes and %d BackendTrafficPolicies, want one of each", nroutes, npols)
	}
	if route.APIVersion != "aigateway.envoyproxy.io/v1beta1" || p.APIVersion != "gateway.envoyproxy.io/v1alpha1" {
		t.Errorf("apiVersions %q and %q", route.APIVersion, p.APIVersion)
	}
	keys := map[string]string{} // metadataKey → type
	for i, c := range route.Spec.LLMRequestCosts {
		if !slices.Contains(costTypes, c.Type) {
			t.Errorf("llmRequestCosts[%d]: type %q is not one of %v", i, c.Type, costTypes)
		}
		if (c.Type == "CEL") != (c.CEL != "") {
			t.Errorf("llmRequestCosts[%d]: cel goes with type CEL, and only with it", i)
		}
		if _, dup := keys[c.MetadataKey]; dup || c.MetadataKey == "" {
			t.Errorf("llmRequestCosts[%d]: metadataKey %q empty or repeated", i, c.MetadataKey)
		}
		keys[c.MetadataKey] = c.Type
	}
	for _, want := range []string{"InputToken", "OutputToken", "TotalToken", "CachedInputToken"} {
		found := false
		for _, typ := range keys {
			found = found || typ == want
		}
		if !found {
			t.Errorf("llmRequestCosts: no %s", want)
		}
	}

	// AI Gateway names the HTTPRoute it generates after the AIGatewayRoute.
	if want := []targetRef{{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: route.Metadata.Name}}; !cmp.Equal(p.Spec.TargetRefs, want) ||
		p.Metadata.Namespace != route.Metadata.Namespace {
		t.Errorf("policy targets %+v in %q, want the generated HTTPRoute %q in %q", p.Spec.TargetRefs, p.Metadata.Namespace, route.Metadata.Name, route.Metadata.Namespace)
	}
	type budget struct {
		requests uint64
		unit     string
	}
	want := map[string]budget{"InputToken": {10, "Hour"}, "OutputToken": {100, "Hour"}, "TotalToken": {1000, "Hour"}}
	got := map[string]budget{}
	for i, r := range p.Spec.RateLimit.Global.Rules {
		where := fmt.Sprintf("aigateway.yaml rules[%d]", i)
		header, key, err := checkRule(where, r)
		if err != nil {
			t.Error(err)
			continue
		}
		if header != "x-user-id" {
			t.Errorf("%s: budget per %q, want per x-user-id", where, header)
		}
		typ, ok := keys[key]
		if !ok {
			t.Errorf("%s: charged from %q, which no llmRequestCosts entry writes: Envoy would never charge it", where, key)
			continue
		}
		got[typ] = budget{r.Limit.Requests, r.Limit.Unit}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(budget{})); diff != "" {
		t.Errorf("budgets by token type (-want +got):\n%s", diff)
	}
}

// TestKubernetesMistakesFail shows that the checks of the Kubernetes
// files catch what they are for, each on a file with one mistake: a
// misspelled field, and a rule that is not a token budget.
func TestKubernetesMistakesFail(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		old, new string
		want     string // in the error
	}{
		{
			name: "misspelled field of the policy",
			file: "backendtrafficpolicy.yaml",
			old:  "clientSelectors:", new: "clientSelector:",
			want: "field clientSelector not found",
		},
		{
			name: "misspelled field of the route",
			file: "aigateway.yaml",
			old:  "llmRequestCosts:", new: "llmRequestCost:",
			want: "field llmRequestCost not found",
		},
		{
			name: "request charged",
			file: "backendtrafficpolicy.yaml",
			old:  "number: 0", new: "number: 1",
			want: "cost.request: want from Number, number 0",
		},
		{
			name: "one budget for all tenants",
			file: "backendtrafficpolicy.yaml",
			old:  "type: Distinct", new: "type: Exact",
			want: "want type Distinct",
		},
		{
			name: "response charged a fixed number",
			file: "backendtrafficpolicy.yaml",
			old:  "from: Metadata", new: "from: Number",
			want: "cost.response: want from Metadata",
		},
		{
			name: "unknown unit",
			file: "backendtrafficpolicy.yaml",
			old:  "unit: Hour", new: "unit: Hours",
			want: `limit.unit "Hours"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := readFile(t, tt.file)
			if !bytes.Contains(orig, []byte(tt.old)) {
				t.Fatalf("%s does not contain %q", tt.file, tt.old)
			}
			data := bytes.Replace(orig, []byte(tt.old), []byte(tt.new), 1)
			err := kubeDocs(tt.file, data, func(kind string) any {
				switch kind {
				case "AIGatewayRoute":
					return &aiGatewayRoute{}
				case "BackendTrafficPolicy":
					return &backendTrafficPolicy{}
				}
				return nil
			})
			if err == nil {
				var p backendTrafficPolicy
				if p, err = decodePolicy(tt.file, data); err == nil {
					_, _, err = checkRule("rules[0]", p.Spec.RateLimit.Global.Rules[0])
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
