package limits

import (
	"fmt"
	"strings"
)

// Via is how one descriptor entry found its rule at one level.
type Via uint8

// The ways an entry finds a rule, in the order Match tries them.
const (
	// ViaNone: no rule at the level has the entry's key with a value that
	// matches.
	ViaNone Via = iota
	// ViaExact: the rule's value equals the entry's value. A wildcard
	// value equal to the entry's value byte for byte counts as exact.
	ViaExact
	// ViaWildcard: the rule's value is a pattern with '*' that matches.
	ViaWildcard
	// ViaAnyValue: the rule has the entry's key and no value.
	ViaAnyValue
)

func (v Via) String() string {
	switch v {
	case ViaExact:
		return "exact value"
	case ViaWildcard:
		return "wildcard"
	case ViaAnyValue:
		return "any value"
	}
	return "nothing"
}

// MatchResult is what Explain concludes about a descriptor.
type MatchResult uint8

// The results. Only MatchLimited and MatchUnlimited mean a rule applies.
const (
	// MatchUnknownDomain: no rule file defines the domain. The engine
	// answers OK with no limits, as envoyproxy/ratelimit does.
	MatchUnknownDomain MatchResult = iota
	// MatchNoEntries: the descriptor has no entries.
	MatchNoEntries
	// MatchNoRule: an entry found no rule at its level.
	MatchNoRule
	// MatchTooDeep: the matching branch has no nested descriptors left
	// but the descriptor has more entries.
	MatchTooDeep
	// MatchNoLimit: the last entry reached a rule without rate_limit.
	MatchNoLimit
	// MatchUnlimited: the last entry reached an unlimited rule.
	MatchUnlimited
	// MatchLimited: the last entry reached a rule with limits.
	MatchLimited
)

func (m MatchResult) String() string {
	switch m {
	case MatchUnknownDomain:
		return "unknown domain"
	case MatchNoEntries:
		return "no entries"
	case MatchNoRule:
		return "no rule"
	case MatchTooDeep:
		return "too deep"
	case MatchNoLimit:
		return "no limit"
	case MatchUnlimited:
		return "unlimited"
	case MatchLimited:
		return "limited"
	}
	return fmt.Sprintf("MatchResult(%d)", m)
}

// Explanation is a step-by-step account of how Match treats one
// descriptor, for people who write rules.
type Explanation struct {
	Domain  string
	Entries []Entry
	// Steps has one step per entry that was looked up, in order. It ends
	// early at an entry that found no rule, or when the branch ends.
	Steps []ExplainStep
	// Rule is the rule the descriptor reaches: always what Match returns,
	// so nil unless the last entry landed on a rule. The rule may have no
	// limits (MatchNoLimit).
	Rule   *Rule
	Result MatchResult
	// Reason says in one sentence why Result is what it is.
	Reason string
	// Limits are Rule's limits with the store keys they would use, when
	// Result is MatchLimited or MatchUnlimited.
	Limits []KeyedLimit
	// Hold is the request's hold when the descriptor's last entry names
	// it (Rule.HoldKey; see MatchHold): that entry is then no part of the
	// counters' keys.
	Hold string
	// Detours are rules that also matched an entry but lost to the rule
	// that matching took, and whose branch would have led this descriptor
	// to limits other than Rule's. Matching never backtracks to them.
	Detours []Detour
	// Override is how a limit Envoy sent with the descriptor would be
	// counted (Ruleset.OverrideSpec); nil: as the reference, a fixed
	// window.
	Override *OverrideSpec
}

// ExplainStep is the lookup of one entry among the rules of one level.
type ExplainStep struct {
	// Index is the entry's position in the descriptor.
	Index int
	Entry Entry
	// Level is the rules the entry was looked up among: the domain's
	// top-level rules for the first entry, else the previous step's
	// Rule.Children.
	Level []*Rule
	Via   Via
	// Rule is the rule the entry found, nil for ViaNone.
	Rule *Rule
	// Missed are the wildcard rules of the entry's key tried before Rule
	// (or before giving up) whose pattern does not match the value.
	Missed []*Rule
	// Passed are the other rules of this level that match the entry too
	// but come later in the matching order, which is: exact value, then
	// wildcards in config order, then the rule with no value.
	Passed []*Rule
}

// KeyedLimit is one limit that applies to a descriptor and the key of its
// counter.
type KeyedLimit struct {
	Limit *Limit
	// Key is AppendKey's key, without any store prefix. Empty for an
	// unlimited limit, which has no counter.
	Key string
}

// Detour is a branch that matching passed over: at entry Step, Rule also
// matched, and following it would have reached Reaches, a rule with limits.
type Detour struct {
	Step    int
	Rule    *Rule
	Reaches *Rule
}

// Explain matches a descriptor exactly as Match does and records how: for
// each entry, which rule it found and how, and at the end why the result
// is what it is, with the limits that would apply and their store keys.
// Explain allocates; it is for tools, not for the request path.
func (rs *Ruleset) Explain(domain string, entries []Entry) Explanation {
	x := Explanation{Domain: domain, Entries: entries}
	d := rs.domains[domain]
	switch {
	case d == nil:
		x.Result = MatchUnknownDomain
		x.Reason = fmt.Sprintf("no rule file defines domain %q, so the sidecar answers OK with no limits", domain)
		return x
	case len(entries) == 0:
		x.Result = MatchNoEntries
		x.Reason = "the descriptor has no entries (the engine rejects it as invalid)"
		return x
	}
	r := d.root
	for i, e := range entries {
		s := r.next.explain(e)
		s.Index, s.Entry, s.Level = i, e, r.Children
		x.Steps = append(x.Steps, s)
		if s.Rule == nil {
			x.Result = MatchNoRule
			x.Reason = noRuleReason(d, r, s)
			break
		}
		r = s.Rule
		if i == len(entries)-1 {
			x.Rule = r
			x.classify()
			break
		}
		if len(r.Children) == 0 {
			x.Result = MatchTooDeep
			x.Reason = fmt.Sprintf("entries[%d] %s=%s matched %s by %s, but the descriptor has %d entries and the branch ends there, at depth %d",
				i, e.Key, e.Value, describeRule(r), s.Via, len(entries), i+1)
			break
		}
	}
	if n := len(entries); (x.Result == MatchTooDeep || x.Result == MatchNoRule) && n >= 2 {
		if r, hold, ok := rs.MatchHold(domain, entries); ok {
			// The last entry names the request, by the rule's hold_key.
			x.Rule, x.Hold = r, hold
			x.classify()
			x.Reason += fmt.Sprintf("; the last entry, %s, names the request's hold (hold_key)", entries[n-1].Key)
		}
	}
	for _, s := range x.Steps {
		for _, p := range s.Passed {
			if to := descend(p, entries[s.Index+1:]); to != nil && len(to.Limits) > 0 && to != x.Rule {
				x.Detours = append(x.Detours, Detour{Step: s.Index, Rule: p, Reaches: to})
			}
		}
	}
	x.Override = rs.OverrideSpec(domain, entries)
	return x
}

// classify sets the result, reason and limits for a descriptor whose last
// entry reached x.Rule.
func (x *Explanation) classify() {
	r := x.Rule
	switch {
	case len(r.Limits) == 0:
		x.Result = MatchNoLimit
		x.Reason = fmt.Sprintf("reached %s, which has no rate_limit", describeRule(r))
		if len(r.Children) > 0 {
			x.Reason += "; its nested descriptors apply only to descriptors with more entries"
		}
		return
	case r.Unlimited():
		x.Result = MatchUnlimited
		x.Reason = fmt.Sprintf("reached %s, which is unlimited", describeRule(r))
	default:
		x.Result = MatchLimited
		n := "its limit applies"
		if len(r.Limits) > 1 {
			n = fmt.Sprintf("its %d limits apply", len(r.Limits))
		}
		x.Reason = fmt.Sprintf("reached %s at the last entry; %s", describeRule(r), n)
	}
	var scratch []Entry
	entries := x.Entries
	if x.Hold != "" {
		entries = entries[:len(entries)-1]
	}
	ents := counterEntries(r, entries, &scratch)
	for _, l := range r.Limits {
		k := KeyedLimit{Limit: l}
		if !l.Unlimited {
			key, _ := AppendKey(nil, x.Domain, ents, l)
			k.Key = string(key)
		}
		x.Limits = append(x.Limits, k)
	}
}

// explain is find, recording what it tries. Keep the two in step: find
// is the request path, explain only describes it.
func (l *level) explain(e Entry) ExplainStep {
	var s ExplainStep
	if r := l.exact[e.Key][e.Value]; r != nil {
		s.Via, s.Rule = ViaExact, r
	}
	for _, w := range l.wildcards[e.Key] {
		if w == s.Rule {
			continue
		}
		switch {
		case !Glob(w.Value, e.Value):
			if s.Rule == nil {
				s.Missed = append(s.Missed, w)
			}
		case s.Rule == nil:
			s.Via, s.Rule = ViaWildcard, w
		default:
			s.Passed = append(s.Passed, w)
		}
	}
	if a := l.anyValue[e.Key]; a != nil {
		if s.Rule == nil {
			s.Via, s.Rule = ViaAnyValue, a
		} else {
			s.Passed = append(s.Passed, a)
		}
	}
	return s
}

// descend continues matching from r, a rule reached by an earlier entry,
// with the remaining entries, as Match would have.
func descend(r *Rule, rest []Entry) *Rule {
	for _, e := range rest {
		if len(r.Children) == 0 {
			return nil
		}
		if r = r.next.find(e); r == nil {
			return nil
		}
	}
	return r
}

func noRuleReason(d *domainRules, parent *Rule, s ExplainStep) string {
	where := fmt.Sprintf("the top level of domain %q", d.name)
	if parent != d.root {
		where = fmt.Sprintf("the nested descriptors of %s", describeRule(parent))
	}
	var same, keys []string
	seen := map[string]bool{}
	for _, r := range s.Level {
		if r.Key == s.Entry.Key {
			same = append(same, r.String())
		} else if !seen[r.Key] {
			seen[r.Key] = true
			keys = append(keys, r.Key)
		}
	}
	e := fmt.Sprintf("entries[%d] %s=%s", s.Index, s.Entry.Key, s.Entry.Value)
	switch {
	case len(s.Level) == 0:
		return fmt.Sprintf("%s finds no rule: %s has none", e, where)
	case len(same) > 0:
		return fmt.Sprintf("%s matches no rule at %s, whose rules for key %q are: %s", e, where, s.Entry.Key, strings.Join(same, ", "))
	default:
		return fmt.Sprintf("%s matches no rule at %s, which has no rule for key %q (its keys: %s)", e, where, s.Entry.Key, strings.Join(keys, ", "))
	}
}

// describeRule names a rule by its YAML path and its key and value, e.g.
// `descriptors[1] (tenant=t*)`.
func describeRule(r *Rule) string {
	return fmt.Sprintf("%s (%s)", r.Path, r)
}
