// Package rlqsexample_test checks the RLQS example (examples/rlqs/envoy.yaml
// and its rules.yaml) against Envoy's own schema, checks that every bucket
// its matchers build reaches a limit the sidecar serves over RLQS, and runs
// those buckets through the sidecar's RLQS server on a real Redis. No Envoy
// binary is needed: go-control-plane carries Envoy's protos and their
// validation rules, and internal/rlqstest plays the filter.
package rlqsexample_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlqv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envoyconf"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"

	// Every typed_config in the file must resolve, so each extension it
	// uses is linked in here; one missing makes decoding fail with
	// "unable to resolve". The ones imported by name above register too.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The names Envoy knows the filters by, and the protocol options key.
const (
	quotaFilter = "envoy.filters.http.rate_limit_quota"
	hcmFilter   = "envoy.filters.network.http_connection_manager"
	routerType  = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
)

// sample is a request to put in a bucket.
type sample struct {
	name    string
	headers map[string]string // lower-case names
}

var samples = []sample{
	{name: "anonymous"},
	{name: "empty tenant", headers: map[string]string{"x-tenant-id": ""}},
	{name: "malformed tenant", headers: map[string]string{"x-tenant-id": "t1 OR 1=1"}},
	{name: "tenant t1", headers: map[string]string{"x-tenant-id": "t1"}},
	{name: "tenant t2", headers: map[string]string{"x-tenant-id": "t2"}},
	{name: "tenant acme", headers: map[string]string{"x-tenant-id": "acme"}},
}

// The bucket each sample lands in and the rule that bucket reaches.
var (
	wantBuckets = map[string]map[string]string{
		"anonymous":        {"client": "anonymous"},
		"empty tenant":     {"client": "anonymous"},
		"malformed tenant": {"client": "anonymous"},
		"tenant t1":        {"tenant": "t1"},
		"tenant t2":        {"tenant": "t2"},
		"tenant acme":      {"tenant": "acme"},
	}
	wantRules = map[string]string{
		"anonymous":        "client_anonymous",
		"empty tenant":     "client_anonymous",
		"malformed tenant": "client_anonymous",
		"tenant t1":        "tenant",
		"tenant t2":        "tenant",
		"tenant acme":      "tenant_acme",
	}
)

func TestBootstrapIsValid(t *testing.T) {
	data, err := os.ReadFile("envoy.yaml")
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
}

func TestBucketsMatchRules(t *testing.T) {
	b, rs := loadPair(t, readFile("envoy.yaml"))
	got, err := checkAgreement(b, rs, samples)
	if err != nil {
		t.Fatal(err)
	}
	gotBuckets := map[string]map[string]string{}
	gotRules := map[string]string{}
	for _, p := range got {
		gotBuckets[p.sample] = p.bucket
		gotRules[p.sample] = p.rule.Name
	}
	if diff := cmp.Diff(wantBuckets, gotBuckets); diff != "" {
		t.Errorf("bucket by sample (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantRules, gotRules); diff != "" {
		t.Errorf("rule reached by sample (-want +got):\n%s", diff)
	}
}

// The broken copies in testdata are a comment line, then envoy.yaml with
// one mistake: old replaced by new. Regenerate a copy when envoy.yaml
// changes.
var brokenCopies = []struct {
	file, old, new string
}{
	{file: "envoy.misspelled.yaml", old: "reporting_interval: 5s", new: "reporting_intervall: 5s"},
	{file: "envoy.unmatched.yaml", old: "                                        tenant:\n", new: "                                        tenant_id:\n"},
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
			name: "misspelled field in a bucket's settings",
			give: readFile("testdata/envoy.misspelled.yaml"),
			want: `unknown field "reporting_intervall"`,
		},
		{
			name: "misspelled field of the filter",
			give: mutated("rlqs_server:", "rlqs_servers:"),
			want: `unknown field "rlqs_servers"`,
		},
		{
			name: "misspelled matcher field",
			give: mutated("on_no_match:", "on_nomatch:"),
			want: `unknown field "on_nomatch"`,
		},
		{
			name: "unknown blanket rule",
			give: mutated("{blanket_rule: DENY_ALL}", "{blanket_rule: DENY}"),
			want: "invalid value for enum",
		},
		{
			name: "regex without its engine",
			give: mutated("google_re2: {}\n", ""),
			want: "RegexMatcher.EngineType: value is required",
		},
		{
			name: "reporting interval too short",
			give: mutated("reporting_interval: 5s", "reporting_interval: 0.05s"),
			want: "ReportingInterval: value must be greater than 100ms",
		},
		{
			name: "empty domain",
			give: mutated("domain: edge-rlqs", `domain: ""`),
			want: "RateLimitQuotaFilterConfig.Domain: value length must be at least 1",
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
			name: "RLQS cluster on HTTP/1",
			give: mutated("http2_protocol_options: {}", "http_protocol_options: {}"),
			want: `cluster "ratelimit" does not speak HTTP/2`,
		},
		{
			name: "RLQS cluster misnamed",
			give: mutated("envoy_grpc: {cluster_name: ratelimit}", "envoy_grpc: {cluster_name: ratelimits}"),
			want: `cluster "ratelimits" is not defined`,
		},
		{
			name: "no quota filter",
			give: mutated("name: envoy.filters.http.rate_limit_quota", "name: envoy.filters.http.rlqs"),
			want: "no envoy.filters.http.rate_limit_quota filter in any listener",
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

// TestBrokenAgreementFails: each case is a bucket that Envoy builds but the
// sidecar cannot serve from a limit, or a setting that gives up the
// fleet-wide bound.
func TestBrokenAgreementFails(t *testing.T) {
	tests := []struct {
		name  string
		give  func() ([]byte, error)
		rules string // replaces rules.yaml when set
		want  string
	}{
		{
			name: "bucket key no rule has",
			give: readFile("testdata/envoy.unmatched.yaml"),
			want: `sample "tenant t1": bucket {tenant_id: t1} as [tenant_id=t1] reaches no limit in domain "edge-rlqs"`,
		},
		{
			name: "wrong domain",
			give: mutated("domain: edge-rlqs", "domain: edge"),
			want: `domain "edge" has no rules`,
		},
		{
			name: "static bucket without a rule",
			give: mutated("client: {string_value: anonymous}", "client: {string_value: guest}"),
			want: `sample "anonymous": bucket {client: guest} as [client=guest] reaches no limit`,
		},
		{
			name: "no catch-all bucket",
			give: withoutLines("                        on_no_match:\n", "                  - name: envoy.filters.http.router\n"),
			want: `sample "anonymous": lands in no bucket: Envoy admits it unreported`,
		},
		{
			name: "header value taken as is, empty included",
			give: mutated(`regex: "[A-Za-z0-9._-]{1,64}"`, `regex: ".*"`),
			want: `sample "empty tenant": builds an empty bucket id`,
		},
		{
			name: "allow-all before the first assignment",
			give: mutated("fallback_rate_limit: {blanket_rule: DENY_ALL}", "fallback_rate_limit: {blanket_rule: ALLOW_ALL}"),
			want: "no_assignment_behavior must deny",
		},
		{
			name: "no expired_assignment_behavior",
			give: mutated("                                    expired_assignment_behavior:\n"+
				"                                      expired_assignment_behavior_timeout: 60s\n"+
				"                                      fallback_rate_limit: {blanket_rule: DENY_ALL}\n", ""),
			want: "expired_assignment_behavior must deny",
		},
		{
			name:  "limit with an algorithm RLQS does not serve",
			give:  readFile("envoy.yaml"),
			rules: "domain: edge-rlqs\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding_log}\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 60}\n",
			want:  "algorithm sliding_log cannot be served exactly over RLQS",
		},
		{
			name:  "window too short",
			give:  readFile("envoy.yaml"),
			rules: "domain: edge-rlqs\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 60}\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 60}\n",
			want:  "window 1s is too short for Envoy's whole-second assignments",
		},
		{
			name:  "two limits on one bucket",
			give:  readFile("envoy.yaml"),
			rules: "domain: edge-rlqs\ndescriptors:\n  - key: tenant\n    rate_limits:\n      - {unit: minute, requests_per_unit: 60}\n      - {unit: hour, requests_per_unit: 600}\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 60}\n",
			want:  "2 enforced limits apply; RLQS serves one per bucket",
		},
		{
			name:  "shadow limit only",
			give:  readFile("envoy.yaml"),
			rules: "domain: edge-rlqs\ndescriptors:\n  - key: tenant\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 60}\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 60}\n",
			want:  "no enforced limit",
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
				if strings.Contains(err.Error(), tt.want) {
					return
				}
				t.Fatal(err)
			}
			files, err := config.ReadFiles("rules.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if tt.rules != "" {
				files = []config.File{{Name: "rules.yaml", Data: []byte(tt.rules)}}
			}
			rs, err := config.Parse(files, config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkAgreement(b, rs, samples)
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

// withoutLines returns envoy.yaml without the lines from the first that
// is from up to the next that is to, which stays.
func withoutLines(from, to string) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := os.ReadFile("envoy.yaml")
		if err != nil {
			return nil, err
		}
		before, rest, ok := strings.Cut(string(b), from)
		if !ok {
			return nil, fmt.Errorf("envoy.yaml does not contain %q", from)
		}
		_, after, ok := strings.Cut(rest, to)
		if !ok {
			return nil, fmt.Errorf("envoy.yaml does not contain %q after %q", to, from)
		}
		return []byte(before + to + after), nil
	}
}

func readFile(path string) func() ([]byte, error) {
	return func() ([]byte, error) { return os.ReadFile(path) }
}

func loadPair(t *testing.T, envoy func() ([]byte, error)) (*bootstrapv3.Bootstrap, *limits.Ruleset) {
	t.Helper()
	data, err := envoy()
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyconf.DecodeBootstrap(data)
	if err != nil {
		t.Fatal(err)
	}
	files, err := config.ReadFiles("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, rs
}

// quotaFilterConfig is one rate_limit_quota filter of a bootstrap.
type quotaFilterConfig struct {
	where string
	c     *rlqv3.RateLimitQuotaFilterConfig
	hcm   *hcmv3.HttpConnectionManager
}

// quotaFilters returns every rate_limit_quota filter of b's static
// listeners, with its connection manager.
func quotaFilters(b *bootstrapv3.Bootstrap) ([]quotaFilterConfig, error) {
	var out []quotaFilterConfig
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
				where := fmt.Sprintf("listener %q filter_chains[%d]", l.GetName(), i)
				if m.GetRds() != nil {
					return nil, fmt.Errorf("%s: rds is not supported by this check; use an inline route_config", where)
				}
				found := false
				for _, hf := range m.GetHttpFilters() {
					if hf.GetName() != quotaFilter {
						continue
					}
					c := &rlqv3.RateLimitQuotaFilterConfig{}
					if err := hf.GetTypedConfig().UnmarshalTo(c); err != nil {
						return nil, fmt.Errorf("%s: %s: %w", where, quotaFilter, err)
					}
					out = append(out, quotaFilterConfig{where: where, c: c, hcm: m})
					found = true
				}
				if !found {
					// Still checked for its router and clusters.
					out = append(out, quotaFilterConfig{where: where, hcm: m})
				}
			}
		}
	}
	return out, nil
}

// checkReferences checks what Envoy checks only when it starts: clusters
// that are named exist, the RLQS cluster speaks HTTP/2 (gRPC needs it), and
// the router is the last HTTP filter. It also requires at least one
// rate_limit_quota filter, since that is what the file is for.
func checkReferences(b *bootstrapv3.Bootstrap) error {
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	qs, err := quotaFilters(b)
	if err != nil {
		return err
	}
	var errs []error
	nfilters := 0
	seen := map[*hcmv3.HttpConnectionManager]bool{}
	for _, q := range qs {
		if !seen[q.hcm] {
			seen[q.hcm] = true
			fs := q.hcm.GetHttpFilters()
			if len(fs) == 0 || fs[len(fs)-1].GetTypedConfig().GetTypeUrl() != routerType {
				errs = append(errs, fmt.Errorf("%s: the last HTTP filter must be the router", q.where))
			}
			for _, vh := range q.hcm.GetRouteConfig().GetVirtualHosts() {
				for i, r := range vh.GetRoutes() {
					if name := r.GetRoute().GetCluster(); name != "" && clusters[name] == nil {
						errs = append(errs, fmt.Errorf("%s: virtual host %q routes[%d]: cluster %q is not defined", q.where, vh.GetName(), i, name))
					}
				}
			}
		}
		if q.c == nil {
			continue
		}
		nfilters++
		name := q.c.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
		switch c := clusters[name]; {
		case name == "":
			errs = append(errs, fmt.Errorf("%s: rlqs_server must use envoy_grpc with a cluster", q.where))
		case c == nil:
			errs = append(errs, fmt.Errorf("%s: rlqs_server: cluster %q is not defined", q.where, name))
		default:
			if ok, err := envoyconf.SpeaksHTTP2(c); err != nil {
				errs = append(errs, err)
			} else if !ok {
				errs = append(errs, fmt.Errorf("%s: rlqs_server: cluster %q does not speak HTTP/2, which gRPC needs", q.where, name))
			}
		}
	}
	if nfilters == 0 {
		errs = append(errs, fmt.Errorf("no %s filter in any listener", quotaFilter))
	}
	return errors.Join(errs...)
}

// placed is the bucket one sample request lands in and the rule it
// reaches.
type placed struct {
	sample  string
	domain  string
	bucket  map[string]string
	entries []limits.Entry // the bucket sorted by key: the descriptor
	rule    *limits.Rule
	limit   *limits.Limit // the one enforced limit RLQS serves the bucket from
}

// checkAgreement puts each sample request in its bucket, as every
// rate_limit_quota filter's matchers do, and checks that each bucket
// reaches, sorted by key, one enforced limit in rs that RLQS serves from
// the store (docs/rlqs.md, "Buckets to rules"), and that the bucket's
// settings deny while it has no quota, so that the fleet-wide bound
// holds. A request that lands in no bucket is an error: Envoy admits it
// unreported.
func checkAgreement(b *bootstrapv3.Bootstrap, rs *limits.Ruleset, samples []sample) ([]placed, error) {
	qs, err := quotaFilters(b)
	if err != nil {
		return nil, err
	}
	var out []placed
	var errs []error
	for _, q := range qs {
		if q.c == nil {
			continue
		}
		dom := q.c.GetDomain()
		if !rs.HasDomain(dom) {
			errs = append(errs, fmt.Errorf("%s: domain %q has no rules", q.where, dom))
			continue
		}
		for _, s := range samples {
			p, err := place(q.c, rs, s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: sample %q: %w", q.where, s.name, err))
				continue
			}
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// place puts one sample in its bucket and finds the limit it reaches.
func place(c *rlqv3.RateLimitQuotaFilterConfig, rs *limits.Ruleset, s sample) (placed, error) {
	p := placed{sample: s.name, domain: c.GetDomain()}
	settings, err := evalMatcher(c.GetBucketMatchers(), s, "bucket_matchers")
	if err != nil {
		return p, err
	}
	if settings == nil {
		return p, errors.New("lands in no bucket: Envoy admits it unreported; add on_no_match")
	}
	if err := checkBehaviours(settings); err != nil {
		return p, err
	}
	id, err := bucketID(settings.GetBucketIdBuilder(), s)
	if err != nil {
		return p, err
	}
	p.bucket = id
	for k, v := range id {
		p.entries = append(p.entries, limits.Entry{Key: k, Value: v})
	}
	slices.SortFunc(p.entries, func(a, b limits.Entry) int { return strings.Compare(a.Key, b.Key) })
	x := rs.Explain(p.domain, p.entries)
	if x.Result != limits.MatchLimited {
		return p, fmt.Errorf("bucket %s as %s reaches no limit in domain %q: %s", formatBucket(id), formatEntries(p.entries), p.domain, x.Reason)
	}
	p.rule = x.Rule
	var enforced []*limits.Limit
	for _, kl := range x.Limits {
		if !kl.Limit.Shadow && !kl.Limit.Unlimited {
			enforced = append(enforced, kl.Limit)
		}
	}
	where := fmt.Sprintf("bucket %s reaches rule %s (%s:%d)", formatBucket(id), x.Rule.Name, x.Rule.File, x.Rule.Line)
	switch {
	case len(enforced) == 0:
		return p, fmt.Errorf("%s with no enforced limit: RLQS answers ALLOW_ALL", where)
	case len(enforced) > 1:
		return p, fmt.Errorf("%s: %d enforced limits apply; RLQS serves one per bucket", where, len(enforced))
	}
	// The server itself says whether it grants quota from the limit:
	// which algorithms, windows and bursts RLQS serves is its to decide.
	if err := rlqs.Serves(rs, rlqs.Options{}, p.domain, id); err != nil {
		return p, fmt.Errorf("%s: %w", where, err)
	}
	p.limit = enforced[0]
	return p, nil
}

// checkBehaviours requires the bucket to deny while it holds no quota:
// before its first assignment and after one expires. docs/rlqs.md's
// fleet-wide bound holds only then. Envoy's default for a missing
// no_assignment_behavior is ALLOW_ALL, and a missing
// expired_assignment_behavior falls back to no_assignment_behavior.
func checkBehaviours(s *rlqv3.RateLimitQuotaBucketSettings) error {
	if !denies(s.GetNoAssignmentBehavior().GetFallbackRateLimit()) {
		return fmt.Errorf("no_assignment_behavior must deny (fallback_rate_limit blanket_rule DENY_ALL), got %v", s.GetNoAssignmentBehavior())
	}
	if !denies(s.GetExpiredAssignmentBehavior().GetFallbackRateLimit()) {
		return fmt.Errorf("expired_assignment_behavior must deny (fallback_rate_limit blanket_rule DENY_ALL), got %v", s.GetExpiredAssignmentBehavior())
	}
	return nil
}

func denies(st *typev3.RateLimitStrategy) bool {
	r, ok := st.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && r.BlanketRule == typev3.RateLimitStrategy_DENY_ALL
}

// evalMatcher evaluates an xDS matcher for a sample as Envoy does and
// returns the bucket settings of the action it reaches, nil for none. Only
// what the example may use is understood (matcher_list; single, and, or and
// not predicates; request header inputs; exact, prefix, suffix, contains
// and safe_regex value matches); anything else is an error, so the check
// never passes by skipping what it cannot evaluate.
func evalMatcher(m *xdsmatcherv3.Matcher, s sample, path string) (*rlqv3.RateLimitQuotaBucketSettings, error) {
	if m == nil {
		return nil, nil
	}
	if m.GetMatcherTree() != nil {
		return nil, fmt.Errorf("%s.matcher_tree is not understood by this check; extend evalMatcher", path)
	}
	for i, fm := range m.GetMatcherList().GetMatchers() {
		p := fmt.Sprintf("%s.matcher_list.matchers[%d]", path, i)
		ok, err := evalPredicate(fm.GetPredicate(), s, p+".predicate")
		if err != nil {
			return nil, err
		}
		if ok {
			return onMatch(fm.GetOnMatch(), s, p+".on_match")
		}
	}
	if m.GetOnNoMatch() != nil {
		return onMatch(m.GetOnNoMatch(), s, path+".on_no_match")
	}
	return nil, nil
}

func onMatch(om *xdsmatcherv3.Matcher_OnMatch, s sample, path string) (*rlqv3.RateLimitQuotaBucketSettings, error) {
	if om.GetKeepMatching() {
		return nil, fmt.Errorf("%s.keep_matching is not understood by this check", path)
	}
	if nested := om.GetMatcher(); nested != nil {
		return evalMatcher(nested, s, path+".matcher")
	}
	settings := &rlqv3.RateLimitQuotaBucketSettings{}
	if err := om.GetAction().GetTypedConfig().UnmarshalTo(settings); err != nil {
		return nil, fmt.Errorf("%s.action: %w", path, err)
	}
	return settings, nil
}

func evalPredicate(p *xdsmatcherv3.Matcher_MatcherList_Predicate, s sample, path string) (bool, error) {
	switch {
	case p.GetSinglePredicate() != nil:
		sp := p.GetSinglePredicate()
		v, ok, err := input(sp.GetInput().GetTypedConfig(), s, path+".single_predicate.input")
		if err != nil {
			return false, err
		}
		if sp.GetValueMatch() == nil {
			return false, fmt.Errorf("%s.single_predicate.custom_match is not understood by this check", path)
		}
		if !ok {
			return false, nil // no data: the predicate does not match
		}
		return matchString(sp.GetValueMatch(), v, path+".single_predicate.value_match")
	case p.GetOrMatcher() != nil:
		for i, q := range p.GetOrMatcher().GetPredicate() {
			ok, err := evalPredicate(q, s, fmt.Sprintf("%s.or_matcher.predicate[%d]", path, i))
			if err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	case p.GetAndMatcher() != nil:
		for i, q := range p.GetAndMatcher().GetPredicate() {
			ok, err := evalPredicate(q, s, fmt.Sprintf("%s.and_matcher.predicate[%d]", path, i))
			if err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case p.GetNotMatcher() != nil:
		ok, err := evalPredicate(p.GetNotMatcher(), s, path+".not_matcher")
		return !ok, err
	}
	return false, fmt.Errorf("%s: no predicate", path)
}

// input returns what a data input yields for a sample, and false when it
// has no data (a missing header).
func input(a *anypb.Any, s sample, path string) (string, bool, error) {
	h := &matcherv3.HttpRequestHeaderMatchInput{}
	if a.MessageIs(h) {
		if err := a.UnmarshalTo(h); err != nil {
			return "", false, fmt.Errorf("%s: %w", path, err)
		}
		v, ok := s.headers[strings.ToLower(h.GetHeaderName())]
		return v, ok, nil
	}
	return "", false, fmt.Errorf("%s: input %s is not understood by this check; extend input()", path, a.GetTypeUrl())
}

func matchString(m *xdsmatcherv3.StringMatcher, v, path string) (bool, error) {
	if m.GetIgnoreCase() {
		return false, fmt.Errorf("%s.ignore_case is not understood by this check", path)
	}
	switch p := m.GetMatchPattern().(type) {
	case *xdsmatcherv3.StringMatcher_Exact:
		return v == p.Exact, nil
	case *xdsmatcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, p.Prefix), nil
	case *xdsmatcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, p.Suffix), nil
	case *xdsmatcherv3.StringMatcher_Contains:
		return strings.Contains(v, p.Contains), nil
	case *xdsmatcherv3.StringMatcher_SafeRegex:
		// Envoy's regex matchers match the whole value; Go's regexp is
		// RE2, as Envoy's google_re2.
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return false, fmt.Errorf("%s.safe_regex: %w", path, err)
		}
		return re.MatchString(v), nil
	}
	return false, fmt.Errorf("%s: %T is not understood by this check", path, m.GetMatchPattern())
}

// bucketID builds a sample's bucket id as Envoy's filter does: a static
// value as is; a header's value, with the key left out when the value is
// empty; and no bucket at all (the request admitted unreported) when a
// header is missing. An empty bucket id is an error: the sidecar refuses
// it, and Envoy skips an answer without an id, so the bucket is never
// assigned quota.
func bucketID(b *rlqv3.RateLimitQuotaBucketSettings_BucketIdBuilder, s sample) (map[string]string, error) {
	if b == nil {
		return nil, errors.New("bucket_id_builder missing: Envoy decides by no_assignment_behavior alone and reports nothing")
	}
	id := map[string]string{}
	for k, vb := range b.GetBucketIdBuilder() {
		path := "bucket_id_builder[" + k + "]"
		switch v := vb.GetValueSpecifier().(type) {
		case *rlqv3.RateLimitQuotaBucketSettings_BucketIdBuilder_ValueBuilder_StringValue:
			id[k] = v.StringValue
		case *rlqv3.RateLimitQuotaBucketSettings_BucketIdBuilder_ValueBuilder_CustomValue:
			val, ok, err := input(v.CustomValue.GetTypedConfig(), s, path+".custom_value")
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("%s has no value: Envoy builds no bucket and admits the request unreported", path)
			}
			if val != "" {
				id[k] = val
			}
		default:
			return nil, fmt.Errorf("%s: no value", path)
		}
	}
	if len(id) == 0 {
		return nil, errors.New("builds an empty bucket id, which the sidecar refuses, and Envoy skips any answer without an id: its requests stay on no_assignment_behavior")
	}
	return id, nil
}

func formatBucket(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + id[k]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func formatEntries(d []limits.Entry) string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
