package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// runCheck implements `ratelimit-sidecar check --config DIR
// [--merge-domains] [--allow-empty-rules]`: it loads the rules as the
// server would, then prints either every problem to stderr and fails, or
// a tree of the rules of each domain to stdout. A path without rule files
// fails too, unless --allow-empty-rules is given, as it does at startup.
func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: ratelimit-sidecar check [--config PATH] [--merge-domains] [--calendar-months] [--allow-empty-rules] [--rlqs] [--xds-overlay FILE]")
		fmt.Fprintln(fs.Output(), "Validates the rule files and prints their rules, or every problem found.")
		fmt.Fprintln(fs.Output(), "With --xds-overlay, PATH holds RateLimitConfigs as an xDS server pushes them, and check prints the rules with the overlay applied.")
		fs.PrintDefaults()
	}
	path := fs.String("config", "config/", "rule file or directory of *.yaml/*.yml rule files")
	merge := fs.Bool("merge-domains", false, "let several rule files add to one domain")
	calMonths := fs.Bool("calendar-months", false, "count plain month limits as UTC calendar months, as the server does with this flag")
	allowEmpty := fs.Bool("allow-empty-rules", false, "accept a path with no rule files, as the server does with this flag")
	withRLQS := fs.Bool("rlqs", false, "also list the rules Envoy's rate_limit_quota filter (RLQS) cannot be served from: their buckets get the domain's failure mode")
	bucketTTL := fs.Duration("rlqs-bucket-ttl", 6*time.Second, "with --rlqs: the sidecar's --rlqs-bucket-ttl")
	overlay := fs.String("xds-overlay", "", "an overlay file for rules over xDS: --config then names RateLimitConfigs, one a file, as YAML or JSON (see docs/xds.md)")
	if err := parseCommand(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check: unexpected argument %q", fs.Arg(0))
	}
	load := loadRules
	if *overlay != "" {
		load = func(path string, opts config.Options, stderr io.Writer) (*limits.Ruleset, error) {
			return checkOverlay(path, *overlay, opts, stderr)
		}
	}
	rs, err := load(*path, config.Options{MergeDomains: *merge, AllowEmpty: *allowEmpty, CalendarMonths: *calMonths}, stderr)
	if errors.Is(err, config.ErrNoRules) {
		return fmt.Errorf("%w; pass --allow-empty-rules if the server is meant to run without rules", err)
	}
	if err != nil {
		return err
	}
	checkPrint(stdout, rs, *path)
	if *withRLQS {
		unserved := rlqs.Unserved(rs, rlqs.Options{BucketTTL: *bucketTTL})
		fmt.Fprintf(stdout, "rlqs: %d rules not served from their limits\n", len(unserved))
		for _, u := range unserved {
			fmt.Fprintf(stdout, "  %s\n", u)
		}
	}
	return nil
}

// checkLoad loads the rules at path. If they are invalid it prints every
// problem to stderr, one a line (file:line: path: reason), and returns an
// error that counts them.
func checkLoad(path string, merge, calendarMonths bool, stderr io.Writer) (*limits.Ruleset, error) {
	return loadRules(path, config.Options{MergeDomains: merge, CalendarMonths: calendarMonths}, stderr)
}

// loadRules is checkLoad with every option.
func loadRules(path string, opts config.Options, stderr io.Writer) (*limits.Ruleset, error) {
	rs, err := config.Load(path, opts)
	if err == nil {
		return rs, nil
	}
	problems := config.Problems(err)
	if !errors.As(err, new(*config.Error)) {
		return nil, err // not a problem in the rules, e.g. a missing directory
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	if len(problems) == 1 {
		return nil, fmt.Errorf("invalid config %s: 1 problem", path)
	}
	return nil, fmt.Errorf("invalid config %s: %d problems", path, len(problems))
}

// checkOverlay previews the rules a push of the RateLimitConfigs at
// path makes with the overlay file overlay, as the xDS client would make
// them. An overlay entry that matches nothing fails the check, as a
// problem in the rules does: each is printed to stderr.
func checkOverlay(path, overlay string, opts config.Options, stderr io.Writer) (*limits.Ruleset, error) {
	ov, err := config.LoadOverlay(overlay)
	if err == nil {
		var resources []*anypb.Any
		if resources, err = xds.ReadConfigs(path); err == nil {
			var rs *limits.Ruleset
			var unmatched []error
			if rs, unmatched, err = xds.Preview(resources, ov, opts); err == nil && len(unmatched) == 0 {
				return rs, nil
			}
			err = errors.Join(append(unmatched, err)...)
		}
	}
	problems := config.Problems(err)
	if !errors.As(err, new(*config.Error)) {
		return nil, err
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	return nil, fmt.Errorf("%s with overlay %s: %s", path, overlay, plural(len(problems), "problem"))
}

// checkPrint writes the rules of every domain as a tree, e.g.
//
//	domain edge
//	├── generic_key=global: fixed_window 1000 per 1s  # rules.yaml:13
//	└── tenant (any value): sliding_window 600 per 1m0s  # rules.yaml:21
//	    └── user (any value): token_bucket 5 per 1s, burst 10  # rules.yaml:29
func checkPrint(w io.Writer, rs *limits.Ruleset, root string) {
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
				fmt.Fprintf(w, "%s%s%s  # %s\n", indent, branch, formatRule(r), ruleOrigin(root, r))
				walk(r.Children, indent+next)
			}
		}
		walk(rs.Rules(domain), "")
	}
	fmt.Fprintf(w, "\nok: %s, %s, %s in %s\n",
		plural(len(rs.Domains()), "domain"), plural(nrules, "rule"), plural(nlimits, "limit"), plural(len(rs.Files), "file"))
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
		for i, l := range r.Limits {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(l.String())
		}
	case len(r.Children) > 0:
		b.WriteString("no rate_limit")
	default:
		b.WriteString("no rate_limit (always OK)")
	}
	return b.String()
}

// ruleOrigin is where r is defined: file:line, or for a rule pushed over
// xDS (which has no line) the resource and the YAML path.
func ruleOrigin(root string, r *limits.Rule) string {
	if r.Line == 0 {
		return r.File + " " + r.Path
	}
	return fmt.Sprintf("%s:%d", relPath(root, r.File), r.Line)
}

// relPath is file relative to the --config directory, or its base name
// when --config is the file itself.
func relPath(root, file string) string {
	if rel, err := filepath.Rel(root, file); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return filepath.Base(file)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
