// Package envoyexample_test checks the Envoy configurations we ship
// (examples/envoy/envoy.yaml and the Envoy ConfigMap in k8s/) against
// Envoy's own schema, and checks that every descriptor they make Envoy send
// reaches a limit in the rule files they are shipped with. No Envoy binary
// is needed: go-control-plane carries Envoy's protos and their validation
// rules.
package envoyexample_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envoyconf"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"

	// Every typed_config in the files must resolve, so each extension they
	// use is linked in here; one missing makes decoding fail with
	// "unable to resolve". The ones imported by name above register too.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// The names Envoy knows the filters by, and the protocol options key.
const (
	ratelimitFilter = "envoy.filters.http.ratelimit"
	hcmFilter       = "envoy.filters.network.http_connection_manager"
	routerType      = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
)

// sample is a request to derive descriptors for.
type sample struct {
	name    string
	headers map[string]string // lower-case names
	remote  string            // client address, for remote_address actions
}

// Requests like those of README.md: each combination of the two headers.
var samples = []sample{
	{name: "anonymous", remote: "192.0.2.1"},
	{name: "tenant only", headers: map[string]string{"x-tenant-id": "t1"}, remote: "192.0.2.1"},
	{name: "user of t1", headers: map[string]string{"x-tenant-id": "t1", "x-user-id": "alice"}, remote: "192.0.2.1"},
	{name: "user of acme", headers: map[string]string{"x-tenant-id": "acme", "x-user-id": "bob"}, remote: "192.0.2.1"},
}

// Each configuration we ship, with the rules it is meant for.
var shipped = []struct {
	name  string
	envoy func() ([]byte, error)
	rules func() ([]config.File, error)
}{
	{
		name:  "examples/envoy",
		envoy: readFile("envoy.yaml"),
		rules: ruleFile("rules.yaml"),
	},
	{
		// The rules the image ships as its default.
		name:  "examples/envoy with config/rules.yaml",
		envoy: readFile("envoy.yaml"),
		rules: ruleFile("../../config/rules.yaml"),
	},
	{
		name:  "k8s ConfigMaps",
		envoy: configMapKey("../../k8s/configmap-envoy.yaml", "envoy.yaml"),
		rules: configMapRules("../../k8s/configmap-rules.yaml"),
	},
}

// The rules each sample must reach; the same for every shipped pair.
var wantRules = map[string][]string{
	"anonymous":    {"generic_key_global"},
	"tenant only":  {"generic_key_global", "tenant"},
	"user of t1":   {"generic_key_global", "tenant", "tenant.user"},
	"user of acme": {"generic_key_global", "tenant_acme", "tenant_acme.user"},
}

func TestShippedBootstrapsAreValid(t *testing.T) {
	for _, tt := range shipped {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.envoy()
			if err != nil {
				t.Fatal(err)
			}
			b, err := envoyconf.DecodeBootstrap(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkReferences(b); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestShippedDescriptorsMatchRules(t *testing.T) {
	for _, tt := range shipped {
		t.Run(tt.name, func(t *testing.T) {
			b, rs := loadPair(t, tt.envoy, tt.rules)
			sent, err := checkAgreement(b, rs, samples)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, s := range sent {
				got[s.sample] = append(got[s.sample], s.rule.Name)
			}
			if diff := cmp.Diff(wantRules, got); diff != "" {
				t.Errorf("rules reached by sample (-want +got):\n%s", diff)
			}
		})
	}
}

// The broken copies in testdata are a comment line, then envoy.yaml with
// one mistake: old replaced by new. Regenerate a copy when envoy.yaml
// changes.
var brokenCopies = []struct {
	file, old, new string
}{
	{file: "envoy.misspelled.yaml", old: "failure_mode_deny: false", new: "failure_mode_denny: false"},
	{file: "envoy.unmatched.yaml", old: "descriptor_key: user}", new: "descriptor_key: usr}"},
}

func TestBrokenCopiesAreOneMistakeAway(t *testing.T) {
	orig, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range brokenCopies {
		t.Run(tt.file, func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(orig), tt.old) {
				t.Fatalf("envoy.yaml no longer contains %q", tt.old)
			}
			header, rest, _ := strings.Cut(string(got), "\n")
			if !strings.HasPrefix(header, "# Broken on purpose") {
				t.Errorf("testdata/%s: first line %q, want a \"# Broken on purpose\" comment", tt.file, header)
			}
			want := strings.Replace(string(orig), tt.old, tt.new, 1)
			if diff := cmp.Diff(want, rest); diff != "" {
				t.Errorf("testdata/%s is not envoy.yaml with %q → %q (-want +got):\n%s", tt.file, tt.old, tt.new, diff)
			}
		})
	}
}

// TestBrokenBootstrapsFail shows that decoding catches what it is for, on
// envoy.yaml with one mistake.
func TestBrokenBootstrapsFail(t *testing.T) {
	tests := []struct {
		name string
		give func() ([]byte, error)
		want string // in the error
	}{
		{
			name: "misspelled field inside typed_config",
			give: readFile("testdata/envoy.misspelled.yaml"),
			want: `unknown field "failure_mode_denny"`,
		},
		{
			name: "misspelled top-level field",
			give: mutated("static_resources:", "static_resource:"),
			want: `unknown field "static_resource"`,
		},
		{
			name: "typed_config of an extension not linked in",
			give: mutated("envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.lua.v3.Lua"),
			want: "envoy.extensions.filters.http.lua.v3.Lua",
		},
		{
			name: "badly formed duration",
			give: mutated("timeout: 0.020s", "timeout: 20ms"),
			want: "invalid google.protobuf.Duration value",
		},
		{
			name: "constraint violated inside typed_config",
			give: mutated("domain: edge", `domain: ""`),
			want: "RateLimit.Domain: value length must be at least 1",
		},
		{
			name: "constraint violated in the bootstrap",
			give: mutated("connect_timeout: 0.25s", "connect_timeout: -1s"),
			want: "Cluster.ConnectTimeout: value must be greater than 0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.give()
			if err != nil {
				t.Fatal(err)
			}
			_, err = envoyconf.DecodeBootstrap(data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decodeBootstrap: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBrokenReferencesFail(t *testing.T) {
	tests := []struct {
		name string
		give func() ([]byte, error)
		want string
	}{
		{
			name: "RLS cluster on HTTP/1",
			give: mutated("http2_protocol_options: {}", "http_protocol_options: {}"),
			want: `cluster "ratelimit" does not speak HTTP/2`,
		},
		{
			name: "RLS cluster misnamed",
			give: mutated("envoy_grpc: {cluster_name: ratelimit}", "envoy_grpc: {cluster_name: ratelimits}"),
			want: `cluster "ratelimits" is not defined`,
		},
		{
			name: "route to a missing cluster",
			give: mutated("cluster: backend", "cluster: backend-v2"),
			want: `cluster "backend-v2" is not defined`,
		},
		{
			name: "router missing",
			give: mutated("                  - name: envoy.filters.http.router\n"+
				"                    typed_config:\n"+
				"                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n\n"+
				"    # Stand-in", "\n    # Stand-in"),
			want: "the last HTTP filter must be the router",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.give()
			if err != nil {
				t.Fatal(err)
			}
			b, err := envoyconf.DecodeBootstrap(data)
			if err != nil {
				t.Fatal(err)
			}
			err = checkReferences(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkReferences: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestBrokenAgreementFails: each case is the classic silent
// misconfiguration, a tier that Envoy sends but no rule limits.
func TestBrokenAgreementFails(t *testing.T) {
	tests := []struct {
		name string
		give func() ([]byte, error)
		want string
	}{
		{
			name: "misspelled descriptor key",
			give: readFile("testdata/envoy.unmatched.yaml"),
			want: "[tenant=t1, usr=alice] reaches no rule with a limit",
		},
		{
			name: "wrong domain",
			give: mutated("domain: edge", "domain: egde"),
			want: `domain "egde" has no rules`,
		},
		{
			name: "generic_key value without a rule",
			give: mutated("descriptor_value: global", "descriptor_value: everyone"),
			want: "[generic_key=everyone] reaches no rule with a limit",
		},
		{
			name: "header no request carries",
			give: mutated("header_name: x-user-id", "header_name: x-user"),
			want: "rate_limits[2] sends no descriptor for any sample request",
		},
		{
			name: "action the check cannot derive",
			give: mutated("generic_key: {descriptor_value: global}", "source_cluster: {}"),
			want: "source_cluster is not understood by this check",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, rs := loadPair(t, tt.give, ruleFile("rules.yaml"))
			_, err := checkAgreement(b, rs, samples)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkAgreement: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// mutated returns envoy.yaml with the first old replaced by new.
func mutated(old, new string) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := os.ReadFile("envoy.yaml")
		if err != nil {
			return nil, err
		}
		if !strings.Contains(string(b), old) {
			return nil, fmt.Errorf("envoy.yaml does not contain %q", old)
		}
		return []byte(strings.Replace(string(b), old, new, 1)), nil
	}
}

func loadPair(t *testing.T, envoy func() ([]byte, error), rules func() ([]config.File, error)) (*bootstrapv3.Bootstrap, *limits.Ruleset) {
	t.Helper()
	data, err := envoy()
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyconf.DecodeBootstrap(data)
	if err != nil {
		t.Fatal(err)
	}
	files, err := rules()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, rs
}

func readFile(path string) func() ([]byte, error) {
	return func() ([]byte, error) { return os.ReadFile(path) }
}

func ruleFile(path string) func() ([]config.File, error) {
	return func() ([]config.File, error) { return config.ReadFiles(path) }
}

// configMap reads the data of a ConfigMap manifest.
func configMap(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cm struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cm.Kind != "ConfigMap" {
		return nil, fmt.Errorf("%s: kind %q, want ConfigMap", path, cm.Kind)
	}
	return cm.Data, nil
}

func configMapKey(path, key string) func() ([]byte, error) {
	return func() ([]byte, error) {
		data, err := configMap(path)
		if err != nil {
			return nil, err
		}
		v, ok := data[key]
		if !ok {
			return nil, fmt.Errorf("%s: no key %q", path, key)
		}
		return []byte(v), nil
	}
}

// configMapRules returns the rule files the sidecar reads from a directory
// where the ConfigMap is mounted: every key ending in .yaml or .yml.
func configMapRules(path string) func() ([]config.File, error) {
	return func() ([]config.File, error) {
		data, err := configMap(path)
		if err != nil {
			return nil, err
		}
		var files []config.File
		for k, v := range data {
			if strings.HasSuffix(k, ".yaml") || strings.HasSuffix(k, ".yml") {
				files = append(files, config.File{Name: path + ":" + k, Data: []byte(v)})
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml or *.yml key", path)
		}
		return files, nil
	}
}

// hcm is one HTTP connection manager of a bootstrap.
type hcm struct {
	where string
	m     *hcmv3.HttpConnectionManager
}

// hcms returns every HTTP connection manager of b's static listeners.
func hcms(b *bootstrapv3.Bootstrap) ([]hcm, error) {
	var out []hcm
	for _, l := range b.GetStaticResources().GetListeners() {
		for i, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				m := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					return nil, fmt.Errorf("listener %q: %w", l.GetName(), err)
				}
				out = append(out, hcm{where: fmt.Sprintf("listener %q filter_chains[%d]", l.GetName(), i), m: m})
			}
		}
	}
	return out, nil
}

// ratelimitFilters returns the ratelimit filters of one connection manager.
func ratelimitFilters(h hcm) ([]*ratelimitv3.RateLimit, error) {
	var out []*ratelimitv3.RateLimit
	for _, f := range h.m.GetHttpFilters() {
		if f.GetName() != ratelimitFilter {
			continue
		}
		rl := &ratelimitv3.RateLimit{}
		if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", h.where, ratelimitFilter, err)
		}
		out = append(out, rl)
	}
	return out, nil
}

// checkReferences checks what Envoy checks only when it starts: clusters
// that are named exist, the RLS cluster speaks HTTP/2 (gRPC needs it), and
// the router is the last HTTP filter. It also requires at least one
// ratelimit filter, since that is what the file is for.
func checkReferences(b *bootstrapv3.Bootstrap) error {
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	hs, err := hcms(b)
	if err != nil {
		return err
	}
	var errs []error
	nfilters := 0
	for _, h := range hs {
		fs := h.m.GetHttpFilters()
		if len(fs) == 0 || fs[len(fs)-1].GetTypedConfig().GetTypeUrl() != routerType {
			errs = append(errs, fmt.Errorf("%s: the last HTTP filter must be the router", h.where))
		}
		rls, err := ratelimitFilters(h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nfilters += len(rls)
		for _, rl := range rls {
			svc := rl.GetRateLimitService()
			if svc.GetTransportApiVersion() != corev3.ApiVersion_V3 {
				errs = append(errs, fmt.Errorf("%s: rate_limit_service.transport_api_version must be V3", h.where))
			}
			name := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
			switch c := clusters[name]; {
			case name == "":
				errs = append(errs, fmt.Errorf("%s: rate_limit_service must use envoy_grpc with a cluster", h.where))
			case c == nil:
				errs = append(errs, fmt.Errorf("%s: rate_limit_service: cluster %q is not defined", h.where, name))
			default:
				if ok, err := envoyconf.SpeaksHTTP2(c); err != nil {
					errs = append(errs, err)
				} else if !ok {
					errs = append(errs, fmt.Errorf("%s: rate_limit_service: cluster %q does not speak HTTP/2, which gRPC needs", h.where, name))
				}
			}
		}
		if h.m.GetRds() != nil {
			errs = append(errs, fmt.Errorf("%s: rds is not supported by this check; use an inline route_config", h.where))
		}
		for _, vh := range h.m.GetRouteConfig().GetVirtualHosts() {
			for i, r := range vh.GetRoutes() {
				if name := r.GetRoute().GetCluster(); name != "" && clusters[name] == nil {
					errs = append(errs, fmt.Errorf("%s: virtual host %q routes[%d]: cluster %q is not defined", h.where, vh.GetName(), i, name))
				}
			}
		}
	}
	if nfilters == 0 {
		errs = append(errs, fmt.Errorf("no %s filter in any listener", ratelimitFilter))
	}
	return errors.Join(errs...)
}

// sent is one descriptor Envoy would send for a sample request, and the
// rule it reaches.
type sent struct {
	sample  string
	where   string
	domain  string
	entries []limits.Entry
	rule    *limits.Rule
}

// checkAgreement derives, for each sample request and each route behind a
// ratelimit filter, the descriptors Envoy would send, as Envoy's rate limit
// actions build them, and checks that each reaches a rule with a limit in
// rs. It also fails for a rate_limits entry that sends nothing for every
// sample, which would mean a header name or action no sample exercises.
//
// Only the actions our examples may use are understood (generic_key,
// request_headers, remote_address, destination_cluster); any other is an
// error, so the check never passes by skipping what it cannot derive.
func checkAgreement(b *bootstrapv3.Bootstrap, rs *limits.Ruleset, samples []sample) ([]sent, error) {
	hs, err := hcms(b)
	if err != nil {
		return nil, err
	}
	var out []sent
	var errs []error
	for _, h := range hs {
		filters, err := ratelimitFilters(h)
		if err != nil {
			return nil, err
		}
		for _, rl := range filters {
			domain := rl.GetDomain()
			for _, vh := range h.m.GetRouteConfig().GetVirtualHosts() {
				for i, r := range vh.GetRoutes() {
					where := fmt.Sprintf("%s: virtual host %q routes[%d]", h.where, vh.GetName(), i)
					dom, entries, err := effectiveRateLimits(rl, vh, r)
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", where, err))
						continue
					}
					if dom == "" {
						dom = domain
					}
					if len(entries) > 0 && !rs.HasDomain(dom) {
						errs = append(errs, fmt.Errorf("%s: domain %q has no rules", where, dom))
						continue
					}
					for j, e := range entries {
						n := 0
						for _, s := range samples {
							d, err := descriptor(e, s, r)
							if err != nil {
								errs = append(errs, fmt.Errorf("%s: rate_limits[%d]: %w", where, j, err))
								break
							}
							if len(d) == 0 {
								continue
							}
							n++
							rule := rs.Match(dom, d)
							if rule == nil || len(rule.Limits) == 0 {
								errs = append(errs, fmt.Errorf("%s: rate_limits[%d]: sample %q: descriptor %s reaches no rule with a limit in domain %q",
									where, j, s.name, formatEntries(d), dom))
								continue
							}
							out = append(out, sent{sample: s.name, where: where, domain: dom, entries: d, rule: rule})
						}
						if n == 0 {
							errs = append(errs, fmt.Errorf("%s: rate_limits[%d] sends no descriptor for any sample request", where, j))
						}
					}
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// effectiveRateLimits returns the rate_limits entries a ratelimit filter
// uses on route r, and the domain if a per-route config overrides it, by
// Envoy's precedence: the route's or virtual host's RateLimitPerRoute
// rate_limits, then the filter's own rate_limits, then the route's (and,
// by vh_rate_limits, the virtual host's) entries of the filter's stage.
func effectiveRateLimits(rl *ratelimitv3.RateLimit, vh *routev3.VirtualHost, r *routev3.Route) (string, []*routev3.RateLimit, error) {
	per := &ratelimitv3.RateLimitPerRoute{}
	a := r.GetTypedPerFilterConfig()[ratelimitFilter]
	if a == nil {
		a = vh.GetTypedPerFilterConfig()[ratelimitFilter]
	}
	if a != nil {
		if err := a.UnmarshalTo(per); err != nil {
			return "", nil, fmt.Errorf("typed_per_filter_config: %w", err)
		}
		if len(per.GetRateLimits()) > 0 {
			return per.GetDomain(), per.GetRateLimits(), nil
		}
	}
	if len(rl.GetRateLimits()) > 0 {
		return per.GetDomain(), rl.GetRateLimits(), nil
	}
	var out []*routev3.RateLimit
	stage := func(e *routev3.RateLimit) bool { return e.GetStage().GetValue() == rl.GetStage() }
	for _, e := range r.GetRoute().GetRateLimits() {
		if stage(e) {
			out = append(out, e)
		}
	}
	includeVH := false
	switch per.GetVhRateLimits() {
	case ratelimitv3.RateLimitPerRoute_OVERRIDE:
		includeVH = len(r.GetRoute().GetRateLimits()) == 0
	case ratelimitv3.RateLimitPerRoute_INCLUDE:
		includeVH = true
	}
	if includeVH {
		for _, e := range vh.GetRateLimits() {
			if stage(e) {
				out = append(out, e)
			}
		}
	}
	return per.GetDomain(), out, nil
}

// descriptor builds the descriptor one rate_limits entry makes for a
// request, as Envoy does: its actions' entries in order, nothing at all if
// an action cannot produce its entry (a missing header without
// skip_if_absent), and the entry left out if it may be skipped.
func descriptor(e *routev3.RateLimit, s sample, r *routev3.Route) ([]limits.Entry, error) {
	var d []limits.Entry
	for i, a := range e.GetActions() {
		switch {
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			key := g.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			d = append(d, limits.Entry{Key: key, Value: g.GetDescriptorValue()})
		case a.GetRequestHeaders() != nil:
			h := a.GetRequestHeaders()
			v, ok := s.headers[strings.ToLower(h.GetHeaderName())]
			switch {
			case ok:
				d = append(d, limits.Entry{Key: h.GetDescriptorKey(), Value: v})
			case h.GetSkipIfAbsent():
			default:
				return nil, nil
			}
		case a.GetRemoteAddress() != nil:
			d = append(d, limits.Entry{Key: "remote_address", Value: s.remote})
		case a.GetDestinationCluster() != nil:
			c := r.GetRoute().GetCluster()
			if c == "" {
				return nil, fmt.Errorf("actions[%d]: destination_cluster on a route without a single cluster", i)
			}
			d = append(d, limits.Entry{Key: "destination_cluster", Value: c})
		default:
			return nil, fmt.Errorf("actions[%d]: %s is not understood by this check; extend descriptor()", i, actionName(a))
		}
	}
	return d, nil
}

func actionName(a *routev3.RateLimit_Action) string {
	var name string
	a.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		name = string(fd.Name())
		return false
	})
	return name
}

func formatEntries(d []limits.Entry) string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
