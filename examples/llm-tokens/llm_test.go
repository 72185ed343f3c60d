// Package llmexample_test checks the LLM token budget example
// (examples/llm-tokens) without Envoy, Kubernetes or Redis. This file
// checks what Envoy Gateway renders for backendtrafficpolicy.yaml
// (ratelimitconfig.yaml for the rate-limit service, routes.yaml for
// Envoy) against go-control-plane's protos, and the sidecar's own rule
// file; kube_test.go checks the Kubernetes resources, and replay_test.go
// replays through the sidecar the calls Envoy makes for one tenant.
package llmexample_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envoyconf"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The names the files share.
const (
	ratelimitFilter = "envoy.filters.http.ratelimit"
	// domain is the listener's name, Envoy Gateway's domain for rules that
	// are not shared.
	domain = "default/eg/http"
	// routeKey is the route's descriptor key and value: its name in
	// Envoy Gateway's IR.
	routeKey = "httproute/default/llm/rule/0/match/0/*"
	// tenantKey is the descriptor key of rule 0's first header match.
	tenantKey = "rule-0-match-0"
	// aiGatewayNamespace is where Envoy AI Gateway's filter writes the
	// token counts in dynamic metadata.
	aiGatewayNamespace = "io.envoy.ai_gateway"
)

// decodeProto decodes a YAML file into m as Envoy reads YAML: YAML to
// JSON, then the proto JSON mapping, refusing unknown fields and types
// it cannot resolve. Then it checks the validation rules of m and of
// every message packed in an Any below it.
func decodeProto(path string, m proto.Message) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%s: yaml to json: %w", path, err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return envoyconf.Validate(m, path)
}

func readRoutes(t *testing.T) *routev3.RouteConfiguration {
	t.Helper()
	rc := &routev3.RouteConfiguration{}
	if err := decodeProto("routes.yaml", rc); err != nil {
		t.Fatal(err)
	}
	return rc
}

func readRateLimitConfig(t *testing.T) *rlsconf.RateLimitConfig {
	t.Helper()
	cfg := &rlsconf.RateLimitConfig{}
	if err := decodeProto("ratelimitconfig.yaml", cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// limitedRoute is a route with the ratelimit filter's per-route config.
type limitedRoute struct {
	name string
	cfg  *rlfilterv3.RateLimitPerRoute
}

// limitedRoutes returns the routes of rc that configure the ratelimit
// filter, as Envoy Gateway does: in typed_per_filter_config, whose
// rate_limits Envoy then uses instead of the route's own.
func limitedRoutes(rc *routev3.RouteConfiguration) ([]limitedRoute, error) {
	var out []limitedRoute
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetTypedPerFilterConfig()[ratelimitFilter]
			if a == nil {
				continue
			}
			cfg := &rlfilterv3.RateLimitPerRoute{}
			if err := a.UnmarshalTo(cfg); err != nil {
				return nil, fmt.Errorf("route %q: %w", r.GetName(), err)
			}
			out = append(out, limitedRoute{name: r.GetName(), cfg: cfg})
		}
	}
	return out, nil
}

// TestEnvoyResourcesDecode: both files of what Envoy Gateway renders
// decode strictly and validate against go-control-plane's protos.
func TestEnvoyResourcesDecode(t *testing.T) {
	tests := []struct {
		file string
		give proto.Message
	}{
		{file: "routes.yaml", give: &routev3.RouteConfiguration{}},
		{file: "ratelimitconfig.yaml", give: &rlsconf.RateLimitConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if err := decodeProto(tt.file, tt.give); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDecodeRefusesMistakes shows that decodeProto catches what it is
// for, on routes.yaml with one mistake.
func TestDecodeRefusesMistakes(t *testing.T) {
	orig, err := os.ReadFile("routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string
		want     string // in the error
	}{
		{
			name: "misspelled field inside typed_config",
			old:  "apply_on_stream_done: true", new: "apply_on_stream_end: true",
			want: `unknown field "apply_on_stream_end"`,
		},
		{
			name: "per-route config of an unknown type",
			old:  "ratelimit.v3.RateLimitPerRoute", new: "ratelimit.v3.RateLimitPerRouteX",
			want: "RateLimitPerRouteX",
		},
		{
			name: "constraint violated inside typed_config",
			old:  "header_name: x-tenant-id", new: `header_name: ""`,
			want: "HeaderName",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(orig, []byte(tt.old)) {
				t.Fatalf("routes.yaml does not contain %q", tt.old)
			}
			path := t.TempDir() + "/routes.yaml"
			if err := os.WriteFile(path, bytes.Replace(orig, []byte(tt.old), []byte(tt.new), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			err := decodeProto(path, &routev3.RouteConfiguration{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeProto: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRoutesCheckThenCharge: every rate_limits entry of routes.yaml that
// Envoy sends at request time is a check (hits_addend number 0), and has
// a twin with the same actions that charges at stream end from dynamic
// metadata, so both calls reach the same counter. Each entry also avoids
// what Envoy refuses in RateLimitPerRoute: stage, disable_key, and
// hits_addend with both or neither of number and format.
func TestRoutesCheckThenCharge(t *testing.T) {
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		t.Fatal("routes.yaml: no route configures " + ratelimitFilter)
	}
	for _, r := range routes {
		if r.cfg.GetDomain() != domain {
			t.Errorf("route %q: domain %q, want %q", r.name, r.cfg.GetDomain(), domain)
		}
		var checks, charges []*routev3.RateLimit
		for i, rl := range r.cfg.GetRateLimits() {
			where := fmt.Sprintf("route %q rate_limits[%d]", r.name, i)
			if rl.GetStage() != nil || rl.GetDisableKey() != "" {
				t.Errorf("%s: Envoy refuses stage and disable_key in RateLimitPerRoute", where)
			}
			h := rl.GetHitsAddend()
			if h == nil || (h.GetNumber() != nil) == (h.GetFormat() != "") {
				t.Errorf("%s: hits_addend must hold a number or a format", where)
				continue
			}
			switch {
			case rl.GetApplyOnStreamDone() && h.GetFormat() != "":
				charges = append(charges, rl)
			case !rl.GetApplyOnStreamDone() && h.GetNumber() != nil && h.GetNumber().GetValue() == 0:
				checks = append(checks, rl)
			default:
				t.Errorf("%s: want a check at request time (number 0) or a charge at stream end (format)", where)
			}
		}
		if len(checks) == 0 || len(checks) != len(charges) {
			t.Errorf("route %q: %d checks and %d charges, want one charge for each check", r.name, len(checks), len(charges))
			continue
		}
		for i := range checks {
			a, b := &routev3.RateLimit{Actions: checks[i].GetActions()}, &routev3.RateLimit{Actions: charges[i].GetActions()}
			if !proto.Equal(a, b) {
				t.Errorf("route %q: check %d and its charge have different actions, so they reach different counters", r.name, i)
			}
		}
	}
}

// TestRulesLoad: rules.yaml loads as a rule file, and the descriptors
// routes.yaml makes Envoy send reach its per-tenant limits: a smooth
// token bucket per minute and a daily fixed-window cap for any tenant,
// bigger ones for acme.
func TestRulesLoad(t *testing.T) {
	rs, err := config.Load("rules.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type lim struct {
		Algorithm       string
		Requests, Burst uint64
		Unit            string
	}
	tests := []struct {
		tenant string
		want   []lim
	}{
		{tenant: "t1", want: []lim{{"token_bucket", 10000, 10000, "minute"}, {"fixed_window", 2000000, 0, "day"}}},
		{tenant: "acme", want: []lim{{"token_bucket", 50000, 50000, "minute"}, {"fixed_window", 10000000, 0, "day"}}},
	}
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.tenant, func(t *testing.T) {
			atRequest, atEnd, err := envoyCalls(routes[0].cfg, tenant(tt.tenant, 600.0))
			if err != nil {
				t.Fatal(err)
			}
			r := rs.Match(atRequest.GetDomain(), entries(atRequest.GetDescriptors()[0]))
			if r == nil {
				t.Fatalf("%v reaches no rule", entries(atRequest.GetDescriptors()[0]))
			}
			if end := rs.Match(atEnd.GetDomain(), entries(atEnd.GetDescriptors()[0])); end != r {
				t.Errorf("the call at stream end reaches %v, the check %v", end, r)
			}
			var got []lim
			for _, l := range r.Limits {
				got = append(got, lim{l.Algorithm.String(), l.Requests, l.Burst, l.Unit.String()})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("limits of %s (-want +got):\n%s", r.Name, diff)
			}
		})
	}
}
