package ruletext

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Descriptor is one descriptor of a request to explain: its entries, and
// the text they were read from, which Explain shows as it was typed.
type Descriptor struct {
	Text    string
	Entries []limits.Entry
}

// Explain writes, for each descriptor of a request to domain, entry by
// entry which rule of rs matched and how, or why nothing did; then the
// limits that would apply, which of them the request drops for another
// descriptor's limit that replaces them, and the store keys of their
// counters, each after keyPrefix; then the branches matching passed over.
// Descriptors are separated by an empty line.
func Explain(w io.Writer, rs *limits.Ruleset, domain string, descs []Descriptor, keyPrefix string) {
	xs := make([]limits.Explanation, len(descs))
	for i, d := range descs {
		xs[i] = rs.Explain(domain, d.Entries)
	}
	replacedBy := replacements(xs)
	for i, x := range xs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		explainOne(w, i, descs[i].Text, x, keyPrefix, replacedBy[i])
	}
}

// replacement says that descriptor desc's limit named by drops a limit,
// when the descriptors are sent in one request.
type replacement struct {
	desc int
	by   string
}

// replacements returns, for each limit of each explanation, the limits
// that replace it, when the engine drops it: limits.Dropped, which the
// engine uses, decides which limits are dropped, and this only names the
// limits that replace them.
func replacements(xs []limits.Explanation) [][][]replacement {
	var all []*limits.Limit
	for _, x := range xs {
		for _, k := range x.Limits {
			all = append(all, k.Limit)
		}
	}
	dropped := limits.Dropped(all, nil)
	out := make([][][]replacement, len(xs))
	n := 0
	for i, x := range xs {
		out[i] = make([][]replacement, len(x.Limits))
		for j, k := range x.Limits {
			if dropped[n] {
				out[i][j] = replacers(xs, k.Limit.Name)
			}
			n++
		}
	}
	return out
}

// replacers lists the limits of xs that replace name.
func replacers(xs []limits.Explanation, name string) []replacement {
	var rs []replacement
	for i, x := range xs {
		for _, k := range x.Limits {
			if slices.Contains(k.Limit.Replaces, name) {
				rs = append(rs, replacement{desc: i, by: k.Limit.Name})
			}
		}
	}
	return rs
}

// explainOne writes descriptor i's explanation x; replacedBy[j] lists
// the limits that replace x.Limits[j], if the request drops it.
func explainOne(w io.Writer, i int, text string, x limits.Explanation, prefix string, replacedBy [][]replacement) {
	fmt.Fprintf(w, "descriptor %d: %s\n", i+1, text)
	for _, s := range x.Steps {
		entry := fmt.Sprintf("entries[%d] %s=%s", s.Index, s.Entry.Key, s.Entry.Value)
		for _, m := range s.Missed {
			fmt.Fprintf(w, "  %s: tried wildcard %s, no match\n", entry, ruleRef(m))
		}
		if s.Rule == nil {
			fmt.Fprintf(w, "  %s: no rule\n", entry)
			continue
		}
		fmt.Fprintf(w, "  %s: matched %s by %s\n", entry, ruleRef(s.Rule), s.Via)
		for _, p := range s.Passed {
			fmt.Fprintf(w, "      also matches %s, later in the matching order: not tried\n", ruleRef(p))
		}
	}
	fmt.Fprintf(w, "  result: %s\n", x.Reason)
	for j, k := range x.Limits {
		fmt.Fprintf(w, "  limit: %s\n", k.Limit.String())
		for _, r := range replacedBy[j] {
			if r.desc == i {
				fmt.Fprintf(w, "    dropped: limit %q of this descriptor replaces it\n", r.by)
			} else {
				fmt.Fprintf(w, "    dropped when sent with descriptor %d, whose limit %q replaces it\n", r.desc+1, r.by)
			}
		}
		if k.Key != "" {
			fmt.Fprintf(w, "    key: %s%s\n", prefix, k.Key)
			if k.Limit.Charge != limits.ChargeAuto {
				fmt.Fprintf(w, "    charge: %s\n", chargeText(k.Limit.Charge))
			}
		}
	}
	if o := x.Override; o != nil {
		fmt.Fprintf(w, "  a limit Envoy sends with it (descriptor.limit) counts by override: %s, on a key ending override/%s/<window seconds>\n", o, o.Algorithm)
	}
	for _, d := range x.Detours {
		if d.Reaches == d.Rule {
			fmt.Fprintf(w, "  note: entries[%d] also matches %s, whose limits would apply: %s.\n", d.Step, ruleRef(d.Rule), limitList(d.Reaches.Limits))
		} else {
			fmt.Fprintf(w, "  note: entries[%d] also matches %s, whose branch would reach %s: %s.\n", d.Step, ruleRef(d.Rule), ruleRef(d.Reaches), limitList(d.Reaches.Limits))
		}
		fmt.Fprintln(w, "        Matching takes the first match at each level (exact value, then wildcards in config order, then any value) and never backtracks.")
	}
}

// chargeText says which hits on a limit with charge c, set by its rule,
// are usage charges, counted in full past the limit (see limits.Charge).
// The default, auto, goes unsaid.
func chargeText(c limits.Charge) string {
	if c == limits.ChargeUsage {
		return "usage: every hit counts in full, past the limit if need be"
	}
	return "admission: hits that do not fit reject the request and count nowhere, even a descriptor's own hits_addend"
}

// ruleRef names a rule for people: its YAML path, key and value, and where
// it is defined.
func ruleRef(r *limits.Rule) string {
	return fmt.Sprintf("%s (%s) at %s:%d", r.Path, r, r.File, r.Line)
}

// limitList is the limits ls, separated by semicolons.
func limitList(ls []*limits.Limit) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	return strings.Join(s, "; ")
}
