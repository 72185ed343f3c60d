package config_test

import (
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// TestParseGenerated: a rendered document's problems and rules carry no
// line, which would point into text nobody sees, even where a message
// points at another rule.
func TestParseGenerated(t *testing.T) {
	doc := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	_, err := config.ParseGenerated([]config.File{{Name: "gen", Data: []byte(doc + "  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")}}, config.Options{})
	want := `gen: descriptors[1]: duplicate descriptor key "user" value "" at this level (first at gen)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}

	files := []config.File{{Name: "gen", Data: []byte(doc)}}
	rs, err := config.ParseGenerated(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs.Rules("edge")[0]; r.Line != 0 || r.File != "gen" || r.Path != "descriptors[0]" {
		t.Errorf("rule from %s:%d %s, want gen, line 0, descriptors[0]", r.File, r.Line, r.Path)
	}
	if got, want := rs.Checksum, config.Checksum(files); got != want {
		t.Errorf("Checksum(files) = %s, want the ruleset's %s", want, got)
	}
}
