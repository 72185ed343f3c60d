// Package config reads rule files: envoyproxy/ratelimit's descriptor YAML
// and its superset. It parses and validates them into a *limits.Ruleset,
// reporting every problem with its file, line and YAML path, and reloads
// them when they change (see Reloader). An overlay file (see Overlay)
// adds the fields of our rule files to rules another program renders.
package config

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/suggest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// parser turns one file's YAML nodes into rules, collecting errors.
type parser struct {
	file    string
	opts    Options
	domains map[string]*limits.Domain // every file's so far, by name
	errs    []error
	// generated leaves line numbers out of errors and rules: they would
	// point into text nobody sees (ParseGenerated).
	generated bool
	// release drops each descriptor's nodes once it is read, so that a
	// document's nodes and the rules made from them are not all held at
	// once. Set only for a document without aliases, whose nodes are
	// each read once.
	release bool
	// releaseAfter is set once the descriptor being read has a limit
	// with release_after, compiled or not: its hold_key is then no
	// mistake of its own.
	releaseAfter bool
	// levels indexes each level's rules by key and value, so a duplicate
	// check costs O(1) rather than a scan of the level (which made one
	// level of N descriptors cost O(N^2)). Every file's parser shares it:
	// a domain merged from N files would otherwise be indexed again for
	// each file, O(N^2) too.
	levels map[*[]*limits.Rule]map[[2]string]*limits.Rule
	// zone is the file's time_zone: the default of its calendar limits
	// (nil: UTC).
	zone *time.Location
}

// The fields each mapping of a rule file has, for the nearest-name hint of
// an unknown one. Each parsing function's switch has a case for each.
var (
	fileFieldNames       = []string{"domain", "descriptors", "failure_mode", "override", "time_zone"}
	descriptorFieldNames = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "charge", "metadata", "hold_key",
		"override"}
	limitFieldNames = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm",
		"burst", "unit_multiplier", "lease", "release_after", "calendar", "time_zone", "week_start", "reset_day"}
)

// fields calls fn for each key of a mapping node, rejecting non-string keys
// and duplicates.
func (p *parser) fields(n *yaml.Node, path string, fn func(key string, k, v *yaml.Node)) {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, path, "keys must be strings")
			continue
		}
		if seen[k.Value] {
			p.errorf(k, join(path, k.Value), "field given twice")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
}

// errorf records a problem at node n (nil: no line) and YAML path.
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	e := &Error{File: p.file, Path: path, Msg: cut(fmt.Sprintf(format, args...))}
	if n != nil && !p.generated {
		e.Line = n.Line
	}
	p.errs = append(p.errs, e)
}

// unknownField records the field key (its key node k, at path) that is
// none of known, with the nearest of them when one is near: a misspelt
// field is a slip more often than a feature.
func (p *parser) unknownField(k *yaml.Node, path, key string, known []string) {
	p.unknownFieldNote(k, path, key, known, "")
}

// unknownFieldNote is unknownField with a note after "unknown field".
func (p *parser) unknownFieldNote(k *yaml.Node, path, key string, known []string, note string) {
	if near, ok := suggest.Nearest(key, known); ok {
		p.errorf(k, path, "unknown field%s; did you mean %s?", note, near)
		return
	}
	p.errorf(k, path, "unknown field%s", note)
}
