package limits

import (
	"iter"
	"sort"
	"strings"
)

// Ruleset is a compiled, immutable set of rules for any number of domains.
// It is safe for concurrent use and must not be modified.
type Ruleset struct {
	// Checksum is a SHA-256 over every file's name and contents.
	Checksum string
	// Files are the rule files read, in load order.
	Files   []string
	domains map[string]*domainRules
}

// Domain is one domain's rules, as rule files define them: the input of
// NewRuleset.
type Domain struct {
	Name string
	// File is where the domain was first defined, for messages.
	File string
	// FailureMode is the domain's failure_mode; FailDefault if its rule
	// files do not set one.
	FailureMode FailureMode
	// Rules are the domain's top-level rules.
	Rules []*Rule
	// Override says how the domain's descriptors that carry Envoy's own
	// limit count it, where no rule says (Rule.Override); nil if its
	// rule files do not say.
	Override *OverrideSpec
}

type domainRules struct {
	name    string
	root    *Rule       // a synthetic rule whose Children are the top level
	failure FailureMode // failure_mode; FailDefault if unset
	holds   bool        // a rule sets HoldKey: see MatchHold
	// overrides: the domain or a rule sets Override; see OverrideSpec.
	overrides bool
}

// NewRuleset compiles domains into a Ruleset: it names every rule and
// builds the lookup tables Match uses. It takes ownership of the domains
// and their rules, which must not change afterwards. The domains' names
// must differ, and so must the (Key, Value) pairs of the rules at each
// level; rule files are checked for both when they are parsed. files and
// checksum describe where the rules came from.
func NewRuleset(domains []*Domain, files []string, checksum string) *Ruleset {
	rs := &Ruleset{Checksum: checksum, Files: files, domains: make(map[string]*domainRules, len(domains))}
	for _, d := range domains {
		root := &Rule{Domain: d.Name, Children: d.Rules, Override: d.Override}
		root.index(0, nil)
		dr := &domainRules{name: d.Name, root: root, failure: d.FailureMode, overrides: d.Override != nil}
		yieldTree(d.Name, root.Children, func(_ string, r *Rule) bool {
			dr.holds = dr.holds || r.HoldKey != ""
			dr.overrides = dr.overrides || r.Override != nil
			return !dr.holds || !dr.overrides
		})
		rs.domains[d.Name] = dr
	}
	return rs
}

// FailureMode returns the failure mode requests of domain get while the
// store cannot decide: the domain's failure_mode, or def if its rules do
// not set one (or no rule file defines the domain).
func (rs *Ruleset) FailureMode(domain string, def FailureMode) FailureMode {
	if d := rs.domains[domain]; d != nil && d.failure != FailDefault {
		return d.failure
	}
	return def
}

// Rule is one descriptor node of a rule file: an entry key, an optional
// value (exact, a '*' pattern, or empty for any value), the limits that
// apply when a request's descriptor ends here, and nested rules.
type Rule struct {
	Domain string
	Key    string
	Value  string
	// Limits apply when the rule is reached at a descriptor's last entry.
	// They are one unlimited limit, or any number of counted ones.
	Limits     []*Limit
	ShadowMode bool
	// QuotaMode is the rule's quota_mode: its limits are quota limits
	// (Limit.Quota).
	QuotaMode bool
	// Charge is the rule's charge: which hits on its limits are usage
	// charges (Limit.Charge).
	Charge         Charge
	DetailedMetric bool
	ValueToMetric  bool
	// ShareThreshold makes every value matching the wildcard Value share
	// one counter.
	ShareThreshold bool
	// Override, when set, says how a descriptor that reaches the rule, or
	// a rule below it that sets none, counts a limit Envoy sends with it
	// (see OverrideSpec and Ruleset.OverrideSpec).
	Override *OverrideSpec
	// HoldKey, when set, names the descriptor entry that names a request
	// (Envoy fills it from x-request-id): a descriptor that reaches the
	// rule and has one entry more, with this key, matches the rule, and
	// that entry's value is the request's hold (see MatchHold and
	// Check.Hold). A concurrency limit takes its slots by it.
	HoldKey string
	// Metadata is the rule's metadata: a mapping whose values are
	// strings, float64s, bools, nil, []any and map[string]any, as
	// google.protobuf.Struct holds them. Nil when the rule has none. A
	// protocol adapter may send it with a request's answer (see
	// pkg/envoy's DynamicMetadata); it must not be modified.
	Metadata map[string]any
	Children []*Rule
	// Where the rule was defined.
	File string
	Line int
	Path string

	// Name is the rule's name in metrics and logs: its keys from the top,
	// joined by '.', each with _<value> when the rule has a value, as
	// envoyproxy/ratelimit names its stats (e.g. tenant_acme.user).
	Name string

	chain []*Rule // chain[i] is the rule matched at entry i; r is last
	next  level
}

// level is how one rule's children are searched.
type level struct {
	exact     map[string]map[string]*Rule // key → value → rule; includes patterns, taken literally
	wildcards map[string][]*Rule          // key → values with '*', in config order
	anyValue  map[string]*Rule            // key → rule without a value
}

// Lineage returns the rules from the top level down to r: Lineage()[i] is
// the rule a descriptor's entry i matched on the way to r.
func (r *Rule) Lineage() []*Rule { return r.chain }

// MetricName returns the rule's name in metrics for a descriptor with
// entries: Name, except that the request's values stand in for the
// rules' at every level if the rule sets detailed_metric, else at the
// levels that set value_to_metric. An entry with an empty value keeps the
// rule's. With nil entries it is Name.
func (r *Rule) MetricName(entries []Entry) string {
	return string(r.AppendMetricName(nil, entries))
}

// AppendMetricName appends MetricName(entries) to dst and returns it.
func (r *Rule) AppendMetricName(dst []byte, entries []Entry) []byte {
	for i, a := range r.chain {
		if i > 0 {
			dst = append(dst, '.')
		}
		dst = append(dst, a.Key...)
		v := a.Value
		if (r.DetailedMetric || a.ValueToMetric) && i < len(entries) && entries[i].Value != "" {
			v = entries[i].Value
		}
		if v != "" {
			dst = append(dst, '_')
			dst = append(dst, v...)
		}
	}
	return dst
}

// String is the rule's key and value for people: `tenant=acme`,
// `tenant=t*`, or `tenant, any value` for a rule without a value.
func (r *Rule) String() string {
	if r.Value == "" {
		return r.Key + ", any value"
	}
	return r.Key + "=" + r.Value
}

// Unlimited reports whether the rule's limit is `unlimited: true`.
func (r *Rule) Unlimited() bool { return len(r.Limits) == 1 && r.Limits[0].Unlimited }

// index names r and its descendants and builds their lookup tables; r is
// at depth (0 for a domain's synthetic root) below the rules of chain.
func (r *Rule) index(depth int, chain []*Rule) {
	if depth > 0 {
		r.chain = append(chain[:depth-1:depth-1], r)
		r.Name = r.MetricName(nil)
	}
	if len(r.Children) == 0 {
		// A leaf's level stays empty: nil maps find nothing, and most
		// rules are leaves.
		return
	}
	r.next = level{exact: map[string]map[string]*Rule{}, anyValue: map[string]*Rule{}}
	for _, c := range r.Children {
		switch {
		case c.Value == "":
			r.next.anyValue[c.Key] = c
		default:
			m := r.next.exact[c.Key]
			if m == nil {
				m = map[string]*Rule{}
				r.next.exact[c.Key] = m
			}
			m[c.Value] = c
			if strings.Contains(c.Value, "*") {
				if r.next.wildcards == nil {
					r.next.wildcards = map[string][]*Rule{}
				}
				r.next.wildcards[c.Key] = append(r.next.wildcards[c.Key], c)
			}
		}
		c.index(depth+1, r.chain)
	}
}

// Domains returns the names of the domains, sorted.
func (rs *Ruleset) Domains() []string {
	names := make([]string, 0, len(rs.domains))
	for n := range rs.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Rules returns a domain's top-level rules, or nil for an unknown domain.
func (rs *Ruleset) Rules(domain string) []*Rule {
	if d := rs.domains[domain]; d != nil {
		return d.root.Children
	}
	return nil
}

// All yields every rule of rs with its domain: domains sorted by name,
// and within one, each rule before its children, in the order the rule
// files give them. It is the one walk over the rule tree for callers that
// want each rule once; those that print the tree recurse on Children.
func (rs *Ruleset) All() iter.Seq2[string, *Rule] {
	return func(yield func(string, *Rule) bool) {
		for _, d := range rs.Domains() {
			if !yieldTree(d, rs.domains[d].root.Children, yield) {
				return
			}
		}
	}
}

// yieldTree yields rules and their descendants, depth first, and reports
// whether yield wants more.
func yieldTree(domain string, rules []*Rule, yield func(string, *Rule) bool) bool {
	for _, r := range rules {
		if !yield(domain, r) || !yieldTree(domain, r.Children, yield) {
			return false
		}
	}
	return true
}

// OverrideSpec returns how a descriptor of domain with entries counts a
// limit Envoy sends with it: the Override of the rule the entries reach
// (as Match finds it), else of the nearest rule above that one that sets
// it, else the domain's. Nil means none says: the reference's fixed
// window. The rules' own limits do not apply to such a descriptor.
func (rs *Ruleset) OverrideSpec(domain string, entries []Entry) *OverrideSpec {
	d := rs.domains[domain]
	if d == nil || !d.overrides {
		return nil
	}
	if r := rs.Match(domain, entries); r != nil {
		for i := len(r.chain) - 1; i >= 0; i-- {
			if s := r.chain[i].Override; s != nil {
				return s
			}
		}
	}
	return d.root.Override
}

// HasDomain reports whether any rule file defines domain.
func (rs *Ruleset) HasDomain(domain string) bool { return rs.domains[domain] != nil }

// MatchHold is Match for a descriptor that names a request's hold: when
// entries reach no rule, but all of them but the last reach a rule whose
// HoldKey is the last entry's key, it returns that rule and the last
// entry's value, the hold. Otherwise it returns Match's rule and no hold.
// In a domain without a HoldKey it costs no more than Match.
func (rs *Ruleset) MatchHold(domain string, entries []Entry) (r *Rule, hold string, ok bool) {
	if r = rs.Match(domain, entries); r != nil {
		return r, "", false
	}
	d, n := rs.domains[domain], len(entries)
	if d == nil || !d.holds || n < 2 {
		return nil, "", false
	}
	if r = rs.Match(domain, entries[:n-1]); r == nil || r.HoldKey == "" || r.HoldKey != entries[n-1].Key {
		return nil, "", false
	}
	return r, entries[n-1].Value, true
}

// Match finds the rule that a descriptor reaches, exactly as
// envoyproxy/ratelimit does. At each level it tries the entry's exact key
// and value, then the wildcard values of that key in config order (first
// match wins), then the rule for the key with no value. It never backtracks
// to a sibling. The descriptor reaches a rule only if its last entry lands
// on it; a descriptor with more entries than the matching branch is deep,
// or one that stops on a rule with no limits, matches nothing that limits.
//
// Match returns nil when nothing is reached. It does not allocate.
func (rs *Ruleset) Match(domain string, entries []Entry) *Rule {
	d := rs.domains[domain]
	if d == nil || len(entries) == 0 {
		return nil
	}
	r := d.root
	for i, e := range entries {
		r = r.next.find(e)
		if r == nil {
			return nil
		}
		if i == len(entries)-1 {
			return r
		}
		if len(r.Children) == 0 {
			return nil
		}
	}
	return nil
}

func (l *level) find(e Entry) *Rule {
	if m := l.exact[e.Key]; m != nil {
		if r := m[e.Value]; r != nil {
			return r
		}
	}
	// Only the key's own wildcards: a level with many wildcard rules
	// under other keys costs a request nothing.
	for _, r := range l.wildcards[e.Key] {
		if Glob(r.Value, e.Value) {
			return r
		}
	}
	return l.anyValue[e.Key]
}

// Glob reports whether s matches pattern, where each '*' matches any run of
// bytes, including none, and every other byte matches itself.
func Glob(pattern, s string) bool {
	// Greedy with one backtrack point: the last '*' seen. Linear for the
	// patterns people write; never allocates.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key   string
	Value string
}

// Join returns a Ruleset made of domains of others: each domain named in
// from is taken, as compiled, from the Ruleset it maps to; a domain that
// Ruleset does not hold is left out. Rules are shared, not copied, so
// that a domain decides the same in both. files and checksum describe the
// whole. It lets rules from several sources (rule files, xDS servers)
// decide in one engine.
func Join(from map[string]*Ruleset, files []string, checksum string) *Ruleset {
	rs := &Ruleset{Checksum: checksum, Files: files, domains: make(map[string]*domainRules, len(from))}
	for d, src := range from {
		if dr := src.domains[d]; dr != nil {
			rs.domains[d] = dr
		}
	}
	return rs
}
