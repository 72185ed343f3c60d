package ruletext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// backtrackNote ends every note about a branch that matching passed over.
const backtrackNote = "        Matching takes the first match at each level (exact value, then wildcards in config order, then any value) and never backtracks.\n"

// descriptors are the descriptors texts give.
func descriptors(t *testing.T, texts ...string) []Descriptor {
	t.Helper()
	ds := make([]Descriptor, len(texts))
	for i, s := range texts {
		ents, err := limits.ParseEntries(s)
		if err != nil {
			t.Fatal(err)
		}
		ds[i] = Descriptor{Text: s, Entries: ents}
	}
	return ds
}

// TestExplain explains descriptors over testdata/nested, which holds the
// nested cases that confuse people most in envoyproxy/ratelimit's issue
// tracker.
func TestExplain(t *testing.T) {
	rs, err := config.Load("testdata/nested", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		domain string
		give   []string // descriptors, as limits.ParseEntries reads them
		prefix string   // the key prefix, if not rls:
		want   string
	}{
		{
			name: "exact sibling blocks the key-only branch",
			give: []string{"tenant=acme,user=bob"},
			want: `descriptor 1: tenant=acme,user=bob
  entries[0] tenant=acme: matched descriptors[0] (tenant=acme) at testdata/nested/rules.yaml:7 by exact value
      also matches descriptors[1] (tenant, any value) at testdata/nested/rules.yaml:13, later in the matching order: not tried
  entries[1] user=bob: no rule
  result: entries[1] user=bob matches no rule at the nested descriptors of descriptors[0] (tenant=acme), whose rules for key "user" are: user=alice
  note: entries[0] also matches descriptors[1] (tenant, any value) at testdata/nested/rules.yaml:13, whose branch would reach descriptors[1].descriptors[0] (user, any value) at testdata/nested/rules.yaml:15: token_bucket 10 per 1s, burst 20.
` + backtrackNote,
		},
		{
			name: "stops on a rule without a limit",
			give: []string{"tenant=acme"},
			want: `descriptor 1: tenant=acme
  entries[0] tenant=acme: matched descriptors[0] (tenant=acme) at testdata/nested/rules.yaml:7 by exact value
      also matches descriptors[1] (tenant, any value) at testdata/nested/rules.yaml:13, later in the matching order: not tried
  result: reached descriptors[0] (tenant=acme), which has no rate_limit; its nested descriptors apply only to descriptors with more entries
`,
		},
		{
			name: "wildcards in config order",
			give: []string{"path=/api/v1/users"},
			want: `descriptor 1: path=/api/v1/users
  entries[0] path=/api/v1/users: matched descriptors[2] (path=/api/*) at testdata/nested/rules.yaml:18 by wildcard
      also matches descriptors[3] (path=/api/v1/*) at testdata/nested/rules.yaml:21, later in the matching order: not tried
  result: reached descriptors[2] (path=/api/*) at the last entry; its limit applies
  limit: fixed_window 50 per 1m0s, name "api"
    key: rls:{4:shop4:path13:/api/v1/users}15:fixed_window/60
  note: entries[0] also matches descriptors[3] (path=/api/v1/*) at testdata/nested/rules.yaml:21, whose limits would apply: fixed_window 5 per 1m0s, name "v1".
` + backtrackNote,
		},
		{
			name: "the first wildcard's branch is too short",
			give: []string{"path=/api/v1/users,method=GET"},
			want: `descriptor 1: path=/api/v1/users,method=GET
  entries[0] path=/api/v1/users: matched descriptors[2] (path=/api/*) at testdata/nested/rules.yaml:18 by wildcard
      also matches descriptors[3] (path=/api/v1/*) at testdata/nested/rules.yaml:21, later in the matching order: not tried
  result: entries[0] path=/api/v1/users matched descriptors[2] (path=/api/*) by wildcard, but the descriptor has 2 entries and the branch ends there, at depth 1
  note: entries[0] also matches descriptors[3] (path=/api/v1/*) at testdata/nested/rules.yaml:21, whose branch would reach descriptors[3].descriptors[0] (method, any value) at testdata/nested/rules.yaml:25: fixed_window 1 per 1m0s.
` + backtrackNote,
		},
		{
			name: "more entries than the branch is deep",
			give: []string{"plan=team,region=eu,user=1"},
			want: `descriptor 1: plan=team,region=eu,user=1
  entries[0] plan=team: matched descriptors[4] (plan=t*) at testdata/nested/rules.yaml:28 by wildcard
  entries[1] region=eu: matched descriptors[4].descriptors[0] (region=eu) at testdata/nested/rules.yaml:32 by exact value
  result: entries[1] region=eu matched descriptors[4].descriptors[0] (region=eu) by exact value, but the descriptor has 3 entries and the branch ends there, at depth 2
`,
		},
		{
			name: "a wildcard that does not match",
			give: []string{"plan=pro,region=eu"},
			want: `descriptor 1: plan=pro,region=eu
  entries[0] plan=pro: tried wildcard descriptors[4] (plan=t*) at testdata/nested/rules.yaml:28, no match
  entries[0] plan=pro: no rule
  result: entries[0] plan=pro matches no rule at the top level of domain "shop", whose rules for key "plan" are: plan=t*
`,
		},
		{
			name: "entries in the wrong order",
			give: []string{"user=1,tenant=acme"},
			want: `descriptor 1: user=1,tenant=acme
  entries[0] user=1: no rule
  result: entries[0] user=1 matches no rule at the top level of domain "shop", which has no rule for key "user" (its keys: tenant, path, plan, ip, free, vip, promo)
`,
		},
		{
			name:   "share_threshold and a key prefix",
			give:   []string{"ip=10.9.9.9"},
			prefix: "prod:",
			want: `descriptor 1: ip=10.9.9.9
  entries[0] ip=10.9.9.9: matched descriptors[5] (ip=10.*) at testdata/nested/rules.yaml:36 by wildcard
  result: reached descriptors[5] (ip=10.*) at the last entry; its limit applies
  limit: sliding_window 100 per 10s
    key: prod:{4:shop2:ip4:10.*}17:sliding_window/10
`,
		},
		{
			name: "replaces across the descriptors of a request",
			give: []string{"path=/api/x", "free=1"},
			want: `descriptor 1: path=/api/x
  entries[0] path=/api/x: matched descriptors[2] (path=/api/*) at testdata/nested/rules.yaml:18 by wildcard
  result: reached descriptors[2] (path=/api/*) at the last entry; its limit applies
  limit: fixed_window 50 per 1m0s, name "api"
    dropped when sent with descriptor 2, whose limit "free" replaces it
    key: rls:{4:shop4:path6:/api/x}15:fixed_window/60

descriptor 2: free=1
  entries[0] free=1: matched descriptors[6] (free, any value) at testdata/nested/rules.yaml:41 by any value
  result: reached descriptors[6] (free, any value), which is unlimited
  limit: unlimited, name "free", replaces "api"
`,
		},
		{
			// The engine keeps an unlimited limit whose name another
			// limit replaces; explain once reported it dropped.
			name: "an unlimited limit is never dropped",
			give: []string{"vip=1", "promo=1"},
			want: `descriptor 1: vip=1
  entries[0] vip=1: matched descriptors[7] (vip, any value) at testdata/nested/rules.yaml:44 by any value
  result: reached descriptors[7] (vip, any value), which is unlimited
  limit: unlimited, name "vip"

descriptor 2: promo=1
  entries[0] promo=1: matched descriptors[8] (promo, any value) at testdata/nested/rules.yaml:46 by any value
  result: reached descriptors[8] (promo, any value) at the last entry; its limit applies
  limit: fixed_window 9 per 1m0s, name "promo", replaces "vip"
    key: rls:{4:shop5:promo1:1}15:fixed_window/60
`,
		},
		{
			name: "escaped comma and '=' in a value",
			give: []string{`plan=t\,x=1`},
			want: `descriptor 1: plan=t\,x=1
  entries[0] plan=t,x=1: matched descriptors[4] (plan=t*) at testdata/nested/rules.yaml:28 by wildcard
  result: reached descriptors[4] (plan=t*) at the last entry; its limit applies
  limit: fixed_window 7 per 1h0m0s
    key: rls:{4:shop4:plan5:t,x=1}17:fixed_window/3600
`,
		},
		{
			name:   "unknown domain",
			domain: "nope",
			give:   []string{"tenant=acme"},
			want: `descriptor 1: tenant=acme
  result: no rule file defines domain "nope", so the sidecar answers OK with no limits
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain, prefix := tt.domain, tt.prefix
			if domain == "" {
				domain = "shop"
			}
			if prefix == "" {
				prefix = "rls:"
			}
			var w strings.Builder
			Explain(&w, rs, domain, descriptors(t, tt.give...), prefix)
			if diff := cmp.Diff(tt.want, w.String()); diff != "" {
				t.Errorf("explanation (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExplainRuleSettings: explain says how a limit Envoy sends with the
// descriptor would be counted, when a rule or the domain says, and which
// hits count past a limit when its rule sets a charge.
func TestExplainRuleSettings(t *testing.T) {
	rs := parse(t, config.Options{}, "rules.yaml", `domain: ai
override: {algorithm: sliding_window}
descriptors:
  - key: tenant
    override: {algorithm: token_bucket, burst: 50}
  - key: route
  - key: tokens
    charge: usage
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: calls
    charge: admission
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	tests := []struct{ give, want string }{
		{"tenant=acme", "  a limit Envoy sends with it (descriptor.limit) counts by override: token_bucket, burst 50, on a key ending override/token_bucket/<window seconds>\n"},
		{"route=r", "  a limit Envoy sends with it (descriptor.limit) counts by override: sliding_window, on a key ending override/sliding_window/<window seconds>\n"},
		{"tokens=t", "    charge: usage: every hit counts in full, past the limit if need be\n"},
		{"calls=c", "    charge: admission: hits that do not fit reject the request and count nowhere, even a descriptor's own hits_addend\n"},
	}
	for _, tt := range tests {
		var w strings.Builder
		Explain(&w, rs, "ai", descriptors(t, tt.give), "rls:")
		if !strings.Contains(w.String(), tt.want) {
			t.Errorf("explain %s:\n%s\nwant the line:\n%s", tt.give, w.String(), tt.want)
		}
	}
}
