package limits_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// matchLimit is what a status reports of its limit.
type matchLimit struct {
	Requests uint64
	Unit     limits.Unit
	Name     string
}

// matchStatus is the part of a limits.Status that Envoy sees.
type matchStatus struct {
	Code      limits.Code
	Limit     *matchLimit // nil when no limit applies
	Remaining uint64
	Unlimited bool
}

type matchResult struct {
	Code     limits.Code // overall
	Statuses []matchStatus
}

// matchStep is one request, sent at storetest.Epoch + at.
type matchStep struct {
	at   time.Duration
	give *limits.Request
	want matchResult
}

func decisionResult(d *limits.Decision) matchResult {
	r := matchResult{Code: d.Code}
	for _, s := range d.Statuses {
		ms := matchStatus{Code: s.Code, Remaining: s.Remaining, Unlimited: s.Unlimited}
		if s.Limit != nil {
			ms.Limit = &matchLimit{Requests: s.Limit.Requests, Unit: s.Limit.Unit, Name: s.Limit.Name}
		}
		r.Statuses = append(r.Statuses, ms)
	}
	return r
}

// TestMatch runs rule files written the envoyproxy/ratelimit way (the
// examples of its README and test/config, reworded) through the engine on
// a memory store, and checks what each request in a sequence gets back.
// Where the reference and this project differ (a request is decided
// all-or-nothing here), the case says so.
func TestMatch(t *testing.T) {
	const (
		sec  = time.Second
		hour = time.Hour
		day  = 24 * time.Hour
	)
	desc := func(kv ...string) limits.Descriptor {
		var d limits.Descriptor
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, limits.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	// descHits gives a descriptor its own hits_addend.
	descHits := func(hits uint64, d limits.Descriptor) limits.Descriptor {
		d.Hits, d.HasHits = hits, true
		return d
	}
	// override gives a descriptor Envoy's per-request limit.
	override := func(requests uint64, unit limits.Unit, d limits.Descriptor) limits.Descriptor {
		d.Override = &limits.Override{Requests: requests, Unit: unit}
		return d
	}
	req := func(ds ...limits.Descriptor) *limits.Request {
		return &limits.Request{Domain: "shop", Descriptors: ds}
	}
	reqHits := func(hits uint64, ds ...limits.Descriptor) *limits.Request {
		return &limits.Request{Domain: "shop", Descriptors: ds, Hits: hits}
	}
	rate := func(n uint64, u limits.Unit) *matchLimit { return &matchLimit{Requests: n, Unit: u} }
	named := func(name string, n uint64, u limits.Unit) *matchLimit {
		return &matchLimit{Requests: n, Unit: u, Name: name}
	}
	ok := func(l *matchLimit, remaining uint64) matchStatus {
		return matchStatus{Code: limits.OK, Limit: l, Remaining: remaining}
	}
	over := func(l *matchLimit, remaining uint64) matchStatus {
		return matchStatus{Code: limits.OverLimit, Limit: l, Remaining: remaining}
	}
	none := matchStatus{} // OK, no limit
	unlimited := matchStatus{Unlimited: true}
	admitted := func(ss ...matchStatus) matchResult { return matchResult{Code: limits.OK, Statuses: ss} }
	rejected := func(ss ...matchStatus) matchResult { return matchResult{Code: limits.OverLimit, Statuses: ss} }

	const (
		second = limits.UnitSecond
		minute = limits.UnitMinute
		hourU  = limits.UnitHour
		dayU   = limits.UnitDay
		week   = limits.UnitWeek
		month  = limits.UnitMonth
		year   = limits.UnitYear
	)

	tests := []struct {
		name  string
		rules []string // rule files, parsed together
		opts  config.Options
		steps []matchStep
	}{
		{
			// Precedence, whatever the config order. detailed_metric and
			// value_to_metric are accepted and change no decision.
			name: "exact value beats wildcard beats key only",
			rules: []string{`
domain: shop
descriptors:
  - key: path
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: path
    value: /api/*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /api/health
    rate_limit: {unit: minute, requests_per_unit: 10}
`},
			steps: []matchStep{
				{
					give: req(desc("path", "/api/health"), desc("path", "/api/users"), desc("path", "/static/app.js")),
					want: admitted(ok(rate(10, minute), 9), ok(rate(20, minute), 19), ok(rate(30, minute), 29)),
				},
				{
					// Each value keeps its own counter under a wildcard
					// or key-only rule.
					give: req(desc("path", "/api/orders"), desc("path", "/static/app.css"), desc("path", "/api/users")),
					want: admitted(ok(rate(20, minute), 19), ok(rate(30, minute), 29), ok(rate(20, minute), 18)),
				},
			},
		},
		{
			// README example 3: a key-only default and a banned value.
			name: "requests_per_unit 0 rejects every request",
			rules: []string{`
domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
`},
			steps: []matchStep{
				{give: req(desc("remote_address", "50.0.0.1")), want: admitted(ok(rate(10, second), 9))},
				{give: req(desc("remote_address", "50.0.0.5")), want: rejected(over(rate(0, second), 0))},
				{at: 5 * sec, give: req(desc("remote_address", "50.0.0.5")), want: rejected(over(rate(0, second), 0))},
			},
		},
		{
			// Not the most specific pattern: the first in the file.
			name: "wildcards are tried in config order",
			rules: []string{`
domain: shop
descriptors:
  - key: path
    value: /api/v1/*
    rate_limit: {name: v1, unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: minute, requests_per_unit: 50}
  - key: host
    value: "*"
    rate_limit: {name: any_host, unit: minute, requests_per_unit: 7}
  - key: host
    value: "*.example.com"
    rate_limit: {name: example, unit: minute, requests_per_unit: 70}
`},
			steps: []matchStep{{
				give: req(desc("path", "/api/v1/users"), desc("path", "/api/v2/users"), desc("host", "www.example.com")),
				want: admitted(ok(named("v1", 5, minute), 4), ok(named("api", 50, minute), 49), ok(named("any_host", 7, minute), 6)),
			}},
		},
		{
			// Our superset: '*' anywhere, any number of times, each
			// matching any run of characters, the empty one too.
			name: "a star anywhere in the value",
			rules: []string{`
domain: shop
descriptors:
  - key: host
    value: "*.example.com"
    rate_limit: {name: suffix, unit: minute, requests_per_unit: 10}
  - key: role
    value: user-*-admin
    rate_limit: {name: infix, unit: minute, requests_per_unit: 20}
  - key: rpc
    value: svc*ep*rpc
    rate_limit: {name: multi, unit: minute, requests_per_unit: 30}
`},
			steps: []matchStep{
				{
					give: req(desc("host", "api.example.com"), desc("role", "user-42-admin"), desc("rpc", "svc1ep2rpc"), desc("rpc", "svceprpc"), desc("role", "user--admin")),
					want: admitted(ok(named("suffix", 10, minute), 9), ok(named("infix", 20, minute), 19), ok(named("multi", 30, minute), 29), ok(named("multi", 30, minute), 29), ok(named("infix", 20, minute), 19)),
				},
				{
					give: req(desc("host", "example.com"), desc("host", "api.example.com.evil"), desc("role", "user-42-admins"), desc("role", "xuser-42-admin"), desc("rpc", "svc1ep2rpcx")),
					want: admitted(none, none, none, none, none),
				},
			},
		},
		{
			// The reference's wildcard: a value ending in '*' is a
			// prefix, and the prefix alone matches too.
			name: "a trailing star matches a prefix",
			rules: []string{`
domain: shop
descriptors:
  - key: path
    value: /files/*
    rate_limit: {unit: minute, requests_per_unit: 3}
`},
			steps: []matchStep{
				{
					give: req(desc("path", "/files/"), desc("path", "/files/a/b/c.txt"), desc("path", "/files/*")),
					want: admitted(ok(rate(3, minute), 2), ok(rate(3, minute), 2), ok(rate(3, minute), 2)),
				},
				{
					give: req(desc("path", "/files"), desc("path", "/file"), desc("path", "x/files/a"), desc("other", "/files/a")),
					want: admitted(none, none, none, none),
				},
			},
		},
		{
			// The reference's test/config/basic_config.yaml, reworded.
			name: "no backtracking to a sibling branch",
			rules: []string{`
domain: shop
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: user
        value: alice
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: region
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: region
    value: local
`},
			steps: []matchStep{{
				give: req(
					desc("tenant", "acme", "user", "alice"),
					// acme matched exactly; its branch has no bob and
					// no key-only user, and the key-only tenant branch
					// is not tried.
					desc("tenant", "acme", "user", "bob"),
					desc("tenant", "globex", "user", "bob"),
					// An exact value without a limit whitelists it: the
					// key-only limit does not apply.
					desc("region", "local"),
					desc("region", "eu"),
				),
				want: admitted(ok(rate(3, minute), 2), none, ok(rate(10, minute), 9), none, ok(rate(100, minute), 99)),
			}},
		},
		{
			// README example 4.
			name: "a limit applies only at the descriptor's last entry",
			rules: []string{`
domain: shop
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value: acme
    rate_limit: {unit: second, requests_per_unit: 15}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 25}
  - key: tenant
    value: globex
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 35}
`},
			steps: []matchStep{{
				give: req(
					desc("api", "x", "user", "u"), // more entries than the branch
					desc("tenant", "acme"),
					desc("tenant", "acme", "user", "u"),
					desc("tenant", "acme", "user", "u", "device", "d"), // deeper than the tree
					desc("tenant", "globex"),                           // stops on a node without a limit
					desc("tenant", "globex", "user", "u"),
				),
				want: admitted(none, ok(rate(15, second), 14), ok(rate(25, second), 24), none, none, ok(rate(35, second), 34)),
			}},
		},
		{
			name: "descriptors nest to any depth",
			rules: []string{`
domain: shop
descriptors:
  - key: org
    descriptors:
      - key: team
        descriptors:
          - key: project
            descriptors:
              - key: user
                value: ci-*
                rate_limit: {unit: hour, requests_per_unit: 4}
`},
			steps: []matchStep{{
				give: req(desc("org", "o", "team", "t", "project", "p", "user", "ci-7"), desc("org", "o", "team", "t", "project", "p", "user", "alice")),
				want: admitted(ok(rate(4, hourU), 3), none),
			}},
		},
		{
			name: "unknown domain and unmatched descriptors get OK without a limit",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`},
			steps: []matchStep{
				{give: &limits.Request{Domain: "elsewhere", Descriptors: []limits.Descriptor{desc("user", "u")}}, want: admitted(none)},
				// The reference looks the domain up before the override.
				{give: &limits.Request{Domain: "elsewhere", Descriptors: []limits.Descriptor{override(1, second, desc("user", "u"))}}, want: admitted(none)},
				{give: req(desc("nobody", "x"), desc("user", "u")), want: admitted(none, ok(rate(1, minute), 0))},
				{give: req(desc("nobody", "x"), desc("user", "u")), want: rejected(none, over(rate(1, minute), 0))},
			},
		},
		{
			// README example 5.
			name: "unlimited is OK and reported as unlimited",
			rules: []string{`
domain: shop
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 1}
`},
			steps: []matchStep{
				{give: req(desc("ldap", "x"), desc("azure", "y")), want: admitted(unlimited, ok(rate(1, minute), 0))},
				{give: req(desc("ldap", "x"), desc("azure", "y")), want: rejected(unlimited, over(rate(1, minute), 0))},
				{give: req(desc("ldap", "x")), want: admitted(unlimited)},
			},
		},
		{
			// README example 6. user-c says "yes", a YAML 1.1 boolean
			// that the reference's yaml.v2 reads as true.
			name: "shadow_mode reports but never denies",
			rules: []string{`
domain: shop
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        value: user-b
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        value: user-c
        shadow_mode: yes
        rate_limit: {unit: second, requests_per_unit: 1}
`},
			steps: []matchStep{
				{give: req(desc("service", "auth", "user", "user-a")), want: admitted(ok(rate(2, second), 1))},
				{give: req(desc("service", "auth", "user", "user-a")), want: admitted(ok(rate(2, second), 0))},
				{give: req(desc("service", "auth", "user", "user-a")), want: admitted(ok(rate(2, second), 0))},
				{give: req(desc("service", "auth", "user", "user-b")), want: admitted(ok(rate(2, second), 1))},
				{give: req(desc("service", "auth", "user", "user-b")), want: admitted(ok(rate(2, second), 0))},
				{give: req(desc("service", "auth", "user", "user-b")), want: rejected(over(rate(2, second), 0))},
				{give: req(desc("service", "auth", "user", "user-c")), want: admitted(ok(rate(1, second), 0))},
				{give: req(desc("service", "auth", "user", "user-c")), want: admitted(ok(rate(1, second), 0))},
			},
		},
		{
			// README example 7.
			name: "replaces drops the named limit of another matched descriptor",
			rules: []string{`
domain: shop
descriptors:
  - key: plan
    value: free
    descriptors:
      - key: user
        value: bob
        rate_limit: {name: bob_free, unit: second, requests_per_unit: 2}
  - key: plan
    value: promo
    descriptors:
      - key: user
        value: bob
        rate_limit:
          unit: second
          requests_per_unit: 5
          replaces:
            - name: bob_free
`},
			steps: []matchStep{
				{give: req(desc("plan", "free", "user", "bob"), desc("plan", "promo", "user", "bob")), want: admitted(none, ok(rate(5, second), 4))},
				{give: req(desc("plan", "free", "user", "bob"), desc("plan", "promo", "user", "bob")), want: admitted(none, ok(rate(5, second), 3))},
				{give: req(desc("plan", "free", "user", "bob"), desc("plan", "promo", "user", "bob")), want: admitted(none, ok(rate(5, second), 2))},
				// The replaced limit was left alone.
				{give: req(desc("plan", "free", "user", "bob")), want: admitted(ok(named("bob_free", 2, second), 1))},
				{give: req(desc("plan", "free", "user", "bob")), want: admitted(ok(named("bob_free", 2, second), 0))},
				{give: req(desc("plan", "free", "user", "bob")), want: rejected(over(named("bob_free", 2, second), 0))},
				// Exhausted, but replaced: it does not deny.
				{give: req(desc("plan", "free", "user", "bob"), desc("plan", "promo", "user", "bob")), want: admitted(none, ok(rate(5, second), 1))},
			},
		},
		{
			// The reference collects replaces from unlimited limits too.
			name: "an unlimited limit's replaces drop other limits",
			rules: []string{`
domain: shop
descriptors:
  - key: vip
    rate_limit:
      unlimited: true
      replaces:
        - name: per_user
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}
`},
			steps: []matchStep{
				{give: req(desc("vip", "v"), desc("user", "u")), want: admitted(unlimited, none)},
				{give: req(desc("vip", "v"), desc("user", "u")), want: admitted(unlimited, none)},
				{give: req(desc("user", "u")), want: admitted(ok(named("per_user", 1, minute), 0))},
			},
		},
		{
			// The reference marks a descriptor unlimited before it
			// applies replaces (src/service/ratelimit.go,
			// constructLimitsToCheck), so a replaced unlimited limit is
			// still answered OK with LimitRemaining MaxUint32.
			name: "a replaced unlimited limit stays unlimited",
			rules: []string{`
domain: shop
descriptors:
  - key: internal
    rate_limit:
      name: internal
      unlimited: true
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: internal
`},
			steps: []matchStep{
				{give: req(desc("internal", "x"), desc("user", "u")), want: admitted(unlimited, ok(rate(5, minute), 4))},
			},
		},
		{
			// The reference's test/config/share_threshold.yaml, reworded.
			name: "share_threshold makes the values of a wildcard share one counter",
			rules: []string{`
domain: shop
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: docs
    value: docs/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`},
			steps: []matchStep{
				{give: req(desc("files", "files/a.pdf")), want: admitted(ok(rate(2, minute), 1))},
				{give: req(desc("files", "files/b.csv")), want: admitted(ok(rate(2, minute), 0))},
				{give: req(desc("files", "files/c.txt")), want: rejected(over(rate(2, minute), 0))},
				{give: req(desc("docs", "docs/a")), want: admitted(ok(rate(2, minute), 1))},
				{give: req(desc("docs", "docs/b")), want: admitted(ok(rate(2, minute), 1))},
				{give: req(desc("docs", "docs/a")), want: admitted(ok(rate(2, minute), 0))},
				// The exact value keeps its own limit and counter.
				{give: req(desc("file", "test1"), desc("file", "test2"), desc("file", "test3")), want: admitted(ok(rate(50, minute), 49), ok(rate(100, minute), 99), ok(rate(100, minute), 98))},
			},
		},
		{
			name: "share_threshold applies per level of a nested descriptor",
			rules: []string{`
domain: shop
descriptors:
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 10}
`},
			steps: []matchStep{
				{give: req(desc("path", "path/1", "file", "file/x", "type", "t")), want: admitted(ok(rate(10, minute), 9))},
				{give: req(desc("path", "path/2", "file", "file/x", "type", "t")), want: admitted(ok(rate(10, minute), 8))},
				{give: req(desc("path", "path/1", "file", "file/y", "type", "t")), want: admitted(ok(rate(10, minute), 9))},
				{give: req(desc("path", "path/1", "file", "file/x", "type", "u")), want: admitted(ok(rate(10, minute), 9))},
			},
		},
		{
			name: "a descriptor's own limit bypasses the rules with a fixed window",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    value: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
`},
			steps: []matchStep{
				{give: req(override(2, hourU, desc("user", "alice"))), want: admitted(ok(rate(2, hourU), 1))},
				{give: req(override(2, hourU, desc("user", "alice"))), want: admitted(ok(rate(2, hourU), 0))},
				{give: req(override(2, hourU, desc("user", "alice"))), want: rejected(over(rate(2, hourU), 0))},
				// The rule's own counter was not touched.
				{give: req(desc("user", "alice")), want: admitted(ok(rate(100, minute), 99))},
				{give: req(override(5, hourU, desc("user", "banned"))), want: admitted(ok(rate(5, hourU), 4))},
				{give: req(override(1, second, desc("nothing", "x"))), want: admitted(ok(rate(1, second), 0))},
				// A fixed window: the next hour starts afresh.
				{at: hour, give: req(override(2, hourU, desc("user", "alice"))), want: admitted(ok(rate(2, hourU), 1))},
			},
		},
		{
			name: "hits_addend of the request and of a descriptor",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`},
			steps: []matchStep{
				{give: reqHits(0, desc("user", "a")), want: admitted(ok(rate(10, minute), 9))},
				{give: reqHits(3, desc("user", "a")), want: admitted(ok(rate(10, minute), 6))},
				// The descriptor's own value wins.
				{give: reqHits(5, descHits(2, desc("user", "a"))), want: admitted(ok(rate(10, minute), 4))},
				// Zero checks without consuming.
				{give: req(descHits(0, desc("user", "a"))), want: admitted(ok(rate(10, minute), 4))},
				// More than is left: rejected whole, nothing consumed
				// (all-or-nothing, unlike the reference). An over status
				// reports 0 left, as the reference, though 4 are: the
				// next step takes them.
				{give: reqHits(5, desc("user", "a")), want: rejected(over(rate(10, minute), 0))},
				{give: reqHits(4, desc("user", "a")), want: admitted(ok(rate(10, minute), 0))},
				{give: reqHits(2, descHits(0, desc("user", "b")), desc("user", "c")), want: admitted(ok(rate(10, minute), 10), ok(rate(10, minute), 8))},
			},
		},
		{
			name: "rate_limits puts several limits on one node, all enforced",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
      - {name: sustained, unit: minute, requests_per_unit: 3}
`},
			steps: []matchStep{
				// Reported: the limit that is over, else the one with the
				// least remaining.
				{give: req(desc("user", "u")), want: admitted(ok(named("burst", 2, second), 1))},
				{give: req(desc("user", "u")), want: admitted(ok(named("burst", 2, second), 0))},
				{give: req(desc("user", "u")), want: rejected(over(named("burst", 2, second), 0))},
				{at: sec, give: req(desc("user", "u")), want: admitted(ok(named("sustained", 3, minute), 0))},
				{at: 2 * sec, give: req(desc("user", "u")), want: rejected(over(named("sustained", 3, minute), 0))},
				{at: time.Minute, give: req(desc("user", "u")), want: admitted(ok(named("burst", 2, second), 1))},
			},
		},
		{
			name: "a rejected request consumes nothing on its other descriptors",
			rules: []string{`
domain: shop
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ip
    value: 50.0.0.5
    rate_limit: {unit: minute, requests_per_unit: 0}
`},
			steps: []matchStep{
				{give: req(desc("tenant", "t"), desc("user", "u")), want: admitted(ok(rate(10, minute), 9), ok(rate(1, minute), 0))},
				{give: req(desc("tenant", "t"), desc("user", "u")), want: rejected(ok(rate(10, minute), 9), over(rate(1, minute), 0))},
				{give: req(desc("tenant", "t"), desc("ip", "50.0.0.5")), want: rejected(ok(rate(10, minute), 9), over(rate(0, minute), 0))},
				{give: req(desc("tenant", "t")), want: admitted(ok(rate(10, minute), 8))},
			},
		},
		{
			// As in the reference, where each descriptor is one INCRBY.
			name: "the same descriptor twice in one request counts twice",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`},
			steps: []matchStep{
				{give: req(desc("user", "u"), desc("user", "u")), want: admitted(ok(rate(3, minute), 2), ok(rate(3, minute), 1))},
				{give: req(desc("user", "u"), desc("user", "u")), want: rejected(ok(rate(3, minute), 1), over(rate(3, minute), 0))},
				{give: req(desc("user", "u")), want: admitted(ok(rate(3, minute), 0))},
			},
		},
		{
			// The check-only copy comes last and shares the first
			// one's counter; the admitted hit must still be stored.
			name: "a check-only copy of a descriptor keeps the other copy's hits",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`},
			steps: []matchStep{
				{give: req(desc("user", "u"), descHits(0, desc("user", "u"))), want: admitted(ok(rate(5, minute), 4), ok(rate(5, minute), 4))},
				{give: req(desc("user", "u")), want: admitted(ok(rate(5, minute), 3))},
			},
		},
		{
			name: "units are case-insensitive",
			rules: []string{`
domain: shop
descriptors:
  - key: a
    rate_limit: {unit: SECOND, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: Minute, requests_per_unit: 1}
  - key: c
    rate_limit: {unit: hOuR, requests_per_unit: 1}
  - key: d
    rate_limit: {unit: Day, requests_per_unit: 1}
  - key: e
    rate_limit: {unit: WEEK, requests_per_unit: 1}
  - key: f
    rate_limit: {unit: Month, requests_per_unit: 1}
  - key: g
    rate_limit: {unit: YEAR, requests_per_unit: 1}
`},
			steps: []matchStep{{
				give: req(desc("a", "x"), desc("b", "x"), desc("c", "x"), desc("d", "x"), desc("e", "x"), desc("f", "x"), desc("g", "x")),
				want: admitted(ok(rate(1, second), 0), ok(rate(1, minute), 0), ok(rate(1, hourU), 0), ok(rate(1, dayU), 0), ok(rate(1, week), 0), ok(rate(1, month), 0), ok(rate(1, year), 0)),
			}},
		},
		{
			// Windows start at multiples of their length since the Unix
			// epoch (storetest.Epoch is one for every unit), not at the
			// first request, and are not calendar months or years.
			name: "week is 7 days, month 30 days, year 365 days",
			rules: []string{`
domain: shop
descriptors:
  - key: w
    rate_limit: {unit: week, requests_per_unit: 1}
  - key: m
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: y
    rate_limit: {unit: year, requests_per_unit: 1}
`},
			steps: []matchStep{
				{at: day, give: req(desc("w", "x")), want: admitted(ok(rate(1, week), 0))},
				{at: day, give: req(desc("m", "x")), want: admitted(ok(rate(1, month), 0))},
				{at: day, give: req(desc("y", "x")), want: admitted(ok(rate(1, year), 0))},
				{at: 7*day - sec, give: req(desc("w", "x")), want: rejected(over(rate(1, week), 0))},
				{at: 7 * day, give: req(desc("w", "x")), want: admitted(ok(rate(1, week), 0))},
				{at: 30*day - sec, give: req(desc("m", "x")), want: rejected(over(rate(1, month), 0))},
				{at: 30 * day, give: req(desc("m", "x")), want: admitted(ok(rate(1, month), 0))},
				{at: 365*day - sec, give: req(desc("y", "x")), want: rejected(over(rate(1, year), 0))},
				{at: 365 * day, give: req(desc("y", "x")), want: admitted(ok(rate(1, year), 0))},
			},
		},
		{
			// The reference's test/config/merge_domain_key{1,2}.yaml.
			name: "merge domains combines two files of one domain",
			rules: []string{`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`, `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
`},
			opts: config.Options{MergeDomains: true},
			steps: []matchStep{
				{give: req(desc("user", "u"), desc("tenant", "t")), want: admitted(ok(rate(1, minute), 0), ok(rate(2, minute), 1))},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []config.File
			for i, r := range tt.rules {
				files = append(files, config.File{Name: fmt.Sprintf("rules%d.yaml", i), Data: []byte(r)})
			}
			rs, err := config.Parse(files, tt.opts)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			clk := storetest.NewClock(storetest.Epoch)
			e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
			var d limits.Decision // reused, as a server goroutine would
			for i, step := range tt.steps {
				clk.Set(storetest.Epoch.Add(step.at))
				if err := e.Decide(context.Background(), step.give, &d); err != nil {
					t.Fatalf("step %d (at %v): Decide: %v", i, step.at, err)
				}
				if diff := cmp.Diff(step.want, decisionResult(&d)); diff != "" {
					t.Errorf("step %d (at %v): decision (-want +got):\n%s", i, step.at, diff)
				}
			}
		})
	}
}

// TestGlob checks the pattern matcher on its own, including patterns
// that need backtracking.
func TestGlob(t *testing.T) {
	tests := []struct {
		pattern string
		give    string
		want    bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything", true},
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"foo*", "foo", true},
		{"foo*", "foobar", true},
		{"foo*", "fo", false},
		{"foo*", "xfoo", false},
		{"*bar", "bar", true},
		{"*bar", "foobar", true},
		{"*bar", "barx", false},
		{"a*b", "ab", true},
		{"a*b", "axxb", true},
		{"a*b", "abab", true},
		{"a*b", "abx", false},
		{"a*b*c", "abcbc", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "acb", false},
		{"**", "x", true},
		{"a**b", "ab", true},
		{"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"*.example.com", ".example.com", true},
		{"*.example.com", "example.com", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s~%s", tt.pattern, tt.give), func(t *testing.T) {
			if got := limits.Glob(tt.pattern, tt.give); got != tt.want {
				t.Errorf("Glob(%q, %q) = %v, want %v", tt.pattern, tt.give, got, tt.want)
			}
		})
	}
}
