package limits

import (
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

type domainRules struct {
	name    string
	file    string      // where the domain was first defined
	root    *Rule       // a synthetic rule whose Children are the top level
	failure FailureMode // failure_mode; FailDefault if unset
}

// failureMode returns domain's failure mode, or def if its rules do not set
// one.
func (rs *Ruleset) failureMode(domain string, def FailureMode) FailureMode {
	if d := rs.domains[domain]; d != nil && d.failure != FailDefault {
		return d.failure
	}
	return def
}

// FailureMode returns the failure_mode a domain's rules set, or FailDefault.
func (rs *Ruleset) FailureMode(domain string) FailureMode { return rs.failureMode(domain, FailDefault) }

// Rule is one descriptor node of a rule file: an entry key, an optional
// value (exact, a '*' pattern, or empty for any value), the limits that
// apply when a request's descriptor ends here, and nested rules.
type Rule struct {
	Domain string
	Key    string
	Value  string
	// Limits apply when the rule is reached at a descriptor's last entry.
	// They are one unlimited limit, or any number of counted ones.
	Limits         []*Limit
	ShadowMode     bool
	DetailedMetric bool
	ValueToMetric  bool
	// ShareThreshold makes every value matching the wildcard Value share
	// one counter.
	ShareThreshold bool
	Children       []*Rule
	// Where the rule was defined.
	File string
	Line int
	Path string

	// Name is the rule's name in metrics and logs: its keys from the top,
	// joined by '.', each with _<value> when the rule has a value, as
	// envoyproxy/ratelimit names its stats (e.g. tenant_acme.user).
	Name string

	parent *Rule
	depth  int     // 1 for a top-level rule
	chain  []*Rule // chain[i] is the ancestor matched at entry i; chain[depth-1] == r
	next   level
}

// level is how one rule's children are searched.
type level struct {
	exact     map[string]map[string]*Rule // key → value → rule; includes patterns, taken literally
	wildcards []*Rule                     // values with '*', in config order
	anyValue  map[string]*Rule            // key → rule without a value
}

func (r *Rule) child(key, value string) *Rule {
	for _, c := range r.Children {
		if c.Key == key && c.Value == value {
			return c
		}
	}
	return nil
}

// Parent returns the enclosing rule, or nil for a top-level rule.
func (r *Rule) Parent() *Rule {
	if r.parent == nil || r.parent.parent == nil {
		return nil
	}
	return r.parent
}

// Lineage returns the rules from the top level down to r: Lineage()[i] is
// the rule a descriptor's entry i matched on the way to r.
func (r *Rule) Lineage() []*Rule { return r.chain }

// Unlimited reports whether the rule's limit is `unlimited: true`.
func (r *Rule) Unlimited() bool { return len(r.Limits) == 1 && r.Limits[0].Unlimited }

// finish builds the lookup structures once every file is parsed.
func (rs *Ruleset) finish() {
	for _, d := range rs.domains {
		d.root.index(0, nil)
	}
}

func (r *Rule) index(depth int, chain []*Rule) {
	r.depth = depth
	if depth > 0 {
		r.chain = append(chain[:depth-1:depth-1], r)
		r.Name = r.Key
		if r.Value != "" {
			r.Name += "_" + r.Value
		}
		if depth > 1 {
			r.Name = r.parent.Name + "." + r.Name
		}
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
				r.next.wildcards = append(r.next.wildcards, c)
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

// HasDomain reports whether any rule file defines domain.
func (rs *Ruleset) HasDomain(domain string) bool { return rs.domains[domain] != nil }

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
	for _, r := range l.wildcards {
		if r.Key == e.Key && Glob(r.Value, e.Value) {
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
