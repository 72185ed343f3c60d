// Package config reads rule files: envoyproxy/ratelimit's descriptor YAML
// and its superset. It parses and validates them into a *limits.Ruleset,
// reporting every problem with its file, line and YAML path, and reloads
// them when they change (see Reloader). An overlay file (see Overlay)
// adds the fields of our rule files to rules another program renders.
package config

import (
	"fmt"
	"strconv"
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

// deref resolves YAML aliases (*anchor) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is YAML null (~, null or nothing).
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// kindName names what n is, for messages that say what was wanted.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return kindName(n.Alias)
	}
	return "nothing"
}

// join appends field to a YAML path.
func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// str reads a string scalar; null is "".
func (p *parser) str(n *yaml.Node, path string) string {
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "want a string, got %s", kindName(n))
		return ""
	}
	return n.Value
}

// bool reads true or false.
func (p *parser) bool(n *yaml.Node, path string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(n, path, "want true or false, got %q", n.Value)
	}
	return b
}

// uint reads a whole number from 0 to maxv.
func (p *parser) uint(n *yaml.Node, path string, maxv uint64) uint64 {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errorf(n, path, "want a whole number, got %q", n.Value)
		return 0
	}
	v, err := strconv.ParseUint(n.Value, 0, 64)
	if err != nil || v > maxv {
		p.errorf(n, path, "want a whole number from 0 to %d, got %s", maxv, n.Value)
		return 0
	}
	return v
}

// positive parses a whole number of at least 1.
func (p *parser) positive(n *yaml.Node, path string) uint64 {
	nerr := len(p.errs)
	v := p.uint(n, path, 1<<32-1)
	if v < 1 && len(p.errs) == nerr {
		p.errorf(n, path, "must be at least 1")
	}
	return v
}
