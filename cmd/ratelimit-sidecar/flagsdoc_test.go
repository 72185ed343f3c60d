package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// flagRow is a row of docs/flags.md's tables: its first cell names one
// flag or more (`--a`, `--b`), its second gives their default.
var flagRow = regexp.MustCompile("(?m)^\\| (`--[a-z0-9-]+`(?:, `--[a-z0-9-]+`)*) \\|([^|]*)\\|")

var flagName = regexp.MustCompile("`--([a-z0-9-]+)`")

// TestFlagsDocumented: docs/flags.md has a row for every flag of the
// server's flag set and for nothing else, and a bool flag's default reads
// false or true there and no other flag's does. The k8s tests read the
// flags from that page (their module cannot import this package), so
// the page is the checked list of them.
func TestFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, row := range flagRow.FindAllSubmatch(doc, -1) {
		for _, n := range flagName.FindAllSubmatch(row[1], -1) {
			defaults[string(n[1])] = string(row[2])
		}
	}
	if len(defaults) < 50 {
		t.Fatalf("read %d flags from docs/flags.md: the table's shape changed", len(defaults))
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	(&settings{}).define(fs)
	fs.VisitAll(func(f *flag.Flag) {
		def, ok := defaults[f.Name]
		if !ok {
			t.Errorf("docs/flags.md has no row for --%s", f.Name)
			return
		}
		delete(defaults, f.Name)
		isBool := false
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
			isBool = b.IsBoolFlag()
		}
		if got := def == " false " || def == " true "; got != isBool {
			t.Errorf("docs/flags.md: --%s's default reads %q; a bool flag's, and only a bool flag's, reads false or true", f.Name, def)
		}
	})
	for name := range defaults {
		t.Errorf("docs/flags.md has a row for --%s, which is no flag", name)
	}
}
