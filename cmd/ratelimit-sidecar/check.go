package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/ruletext"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
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
	opts := config.Options{MergeDomains: *merge, AllowEmpty: *allowEmpty, CalendarMonths: *calMonths}
	var rs *limits.Ruleset
	var err error
	if *overlay != "" {
		rs, err = ruletext.LoadOverlay(*path, *overlay, opts, stderr)
	} else {
		rs, err = ruletext.Load(*path, opts, stderr)
	}
	if errors.Is(err, config.ErrNoRules) {
		return fmt.Errorf("%w; pass --allow-empty-rules if the server is meant to run without rules", err)
	}
	if err != nil {
		return err
	}
	ruletext.Tree(stdout, rs, *path)
	if *withRLQS {
		ruletext.Unserved(stdout, rs, rlqs.Options{BucketTTL: *bucketTTL})
	}
	return nil
}
