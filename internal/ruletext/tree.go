package ruletext

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// Tree writes the rules of every domain of rs as a tree, then a count of
// domains, rules, limits and files, e.g.
//
//	domain edge
//	├── generic_key=global: fixed_window 1000 per 1s  # rules.yaml:13
//	└── tenant (any value): sliding_window 600 per 1m0s  # rules.yaml:21
//	    └── user (any value): token_bucket 5 per 1s, burst 10  # rules.yaml:29
//
// Each rule's file is named relative to root, the rule file or directory
// the rules came from.
func Tree(w io.Writer, rs *limits.Ruleset, root string) {
	nrules, nlimits := 0, 0
	if len(rs.Domains()) == 0 {
		fmt.Fprintln(w, "no rules: every request gets OK")
	}
	for i, domain := range rs.Domains() {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "domain %s", domain)
		if m := rs.FailureMode(domain, limits.FailDefault); m != limits.FailDefault {
			fmt.Fprintf(w, " (failure_mode: %s)", m)
		}
		if o := rs.OverrideSpec(domain, nil); o != nil {
			fmt.Fprintf(w, " (override: %s)", o)
		}
		fmt.Fprintln(w)
		var walk func(rules []*limits.Rule, indent string)
		walk = func(rules []*limits.Rule, indent string) {
			for j, r := range rules {
				branch, next := "├── ", "│   "
				if j == len(rules)-1 {
					branch, next = "└── ", "    "
				}
				nrules++
				nlimits += len(r.Limits)
				fmt.Fprintf(w, "%s%s%s  # %s\n", indent, branch, formatRule(r), origin(root, r))
				walk(r.Children, indent+next)
			}
		}
		walk(rs.Rules(domain), "")
	}
	fmt.Fprintf(w, "\nok: %s, %s, %s in %s\n",
		plural(len(rs.Domains()), "domain"), plural(nrules, "rule"), plural(nlimits, "limit"), plural(len(rs.Files), "file"))
}

// Unserved writes the rules of rs that RLQS cannot serve from their
// limits (rlqs.Unserved), after a line that counts them; o is the RLQS
// server's options.
func Unserved(w io.Writer, rs *limits.Ruleset, o rlqs.Options) {
	unserved := rlqs.Unserved(rs, o)
	fmt.Fprintf(w, "rlqs: %d rules not served from their limits\n", len(unserved))
	for _, u := range unserved {
		fmt.Fprintf(w, "  %s\n", u)
	}
}

// formatRule is a rule's key, value, options and limits on one line.
func formatRule(r *limits.Rule) string {
	var b strings.Builder
	b.WriteString(r.String())
	for _, o := range []struct {
		set  bool
		name string
	}{{r.ShareThreshold, "share_threshold"}, {r.DetailedMetric, "detailed_metric"}, {r.ValueToMetric, "value_to_metric"}} {
		if o.set {
			b.WriteString(" [" + o.name + "]")
		}
	}
	if r.Override != nil {
		b.WriteString(" [override: " + r.Override.String() + "]")
	}
	b.WriteString(": ")
	switch {
	case len(r.Limits) > 0:
		b.WriteString(limitList(r.Limits))
	case len(r.Children) > 0:
		b.WriteString("no rate_limit")
	default:
		b.WriteString("no rate_limit (always OK)")
	}
	return b.String()
}

// origin is where r is defined: file:line, or for a rule pushed over xDS
// (which has no line) the resource and the YAML path.
func origin(root string, r *limits.Rule) string {
	if r.Line == 0 {
		return r.File + " " + r.Path
	}
	return fmt.Sprintf("%s:%d", relPath(root, r.File), r.Line)
}

// relPath is file relative to the root directory, or its base name when
// root is the file itself.
func relPath(root, file string) string {
	if rel, err := filepath.Rel(root, file); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return filepath.Base(file)
}
