package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/ruletext"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// runExplain implements `ratelimit-sidecar explain --config DIR --domain D
// --descriptor 'tenant=acme,user=42' [--descriptor …] [--key-prefix rls:]`:
// for each descriptor it shows, entry by entry, which rule matched and how,
// or why nothing did, then the limits that would apply and the store keys
// of their counters.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: ratelimit-sidecar explain [--config PATH] --domain D --descriptor 'k=v,k=v' [--descriptor ...]")
		fmt.Fprintln(fs.Output(), "Shows how each descriptor matches the rules, the limits that apply and their store keys.")
		fs.PrintDefaults()
	}
	path := fs.String("config", "config/", "rule file or directory of *.yaml/*.yml rule files")
	merge := fs.Bool("merge-domains", false, "let several rule files add to one domain")
	calMonths := fs.Bool("calendar-months", false, "count plain month limits as UTC calendar months (their keys differ), as the server does with this flag")
	domain := fs.String("domain", "", "the request's domain (required)")
	prefix := fs.String("key-prefix", redis.DefaultKeyPrefix, "the Redis store's key prefix, shown before each key")
	var descs descriptorFlag
	fs.Var(&descs, "descriptor", "a `descriptor`: comma-separated key=value entries, in order; a value may hold '=', and \\, is a comma and \\\\ a backslash in a key or value; repeat the flag for each descriptor of the request")
	if err := parseCommand(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("explain: unexpected argument %q", fs.Arg(0))
	case *domain == "":
		return errors.New("explain: --domain is required")
	case len(descs) == 0:
		return errors.New("explain: at least one --descriptor is required")
	}
	rs, err := ruletext.Load(*path, config.Options{MergeDomains: *merge, CalendarMonths: *calMonths}, stderr)
	if err != nil {
		return err
	}
	ruletext.Explain(stdout, rs, *domain, descs, *prefix)
	return nil
}

// descriptorFlag collects --descriptor flags.
type descriptorFlag []ruletext.Descriptor

func (f *descriptorFlag) String() string { return "" }

func (f *descriptorFlag) Set(s string) error {
	ents, err := limits.ParseEntries(s)
	if err != nil {
		return err
	}
	*f = append(*f, ruletext.Descriptor{Text: s, Entries: ents})
	return nil
}
