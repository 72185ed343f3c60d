// Package config reads rule files: envoyproxy/ratelimit's descriptor YAML
// and its superset. It parses and validates them into a *limits.Ruleset,
// reporting every problem with its file, line and YAML path, and reloads
// them when they change (see Reloader). An overlay file (see Overlay)
// adds the fields of our rule files to rules another program renders.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// parseFile parses one file into p.domains. It returns the file's domain
// if the file defines a new one, nil if it adds to one already seen (or
// is broken).
func (p *parser) parseFile(f File) *limits.Domain {
	root := p.root(f)
	if root == nil {
		return nil
	}
	h := p.head(root)
	if h.domain == "" {
		if h.domainNode == nil {
			h.domainNode = root
		}
		p.errorf(h.domainNode, "domain", "required and must not be empty")
		return nil
	}
	d, seen := p.domains[h.domain]
	switch {
	case !seen:
		d = &limits.Domain{Name: h.domain, File: p.file}
		p.domains[h.domain] = d
	case !p.opts.MergeDomains:
		p.errorf(h.domainNode, "domain", "domain %q is already defined in %s (set --merge-domains to combine files)", h.domain, d.File)
		return nil
	}
	p.merge(d, h)
	p.descriptors(h.domain, &d.Rules, h.descNode, "descriptors")
	if seen {
		return nil
	}
	return d
}

// root returns f's document as a mapping within the size bounds, or nil
// after recording why it is not one.
func (p *parser) root(f File) *yaml.Node {
	root := f.Root
	if root == nil {
		if root = p.decode(f.Data); root == nil {
			return nil
		}
	}
	n, msg, aliases := measure(root)
	if n != nil {
		p.errorf(n, "", "%s", msg)
		return nil
	}
	// Without aliases every node is read once, so each descriptor's
	// nodes may go once read.
	p.release = !aliases
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "want a mapping with domain and descriptors, got %s", kindName(root))
		return nil
	}
	return root
}

// fileHead is what a rule file says at its top level, with the nodes
// that later checks name in their errors.
type fileHead struct {
	domain                                   string
	failure                                  limits.FailureMode
	over                                     *limits.OverrideSpec
	domainNode, descNode, failNode, overNode *yaml.Node
}

// head reads the top-level fields of a rule file's root mapping; its
// time_zone goes to p.zone.
func (p *parser) head(root *yaml.Node) fileHead {
	h := fileHead{failure: limits.FailDefault}
	p.fields(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			h.domain = p.str(v, "domain")
			h.domainNode = v
		case "descriptors":
			h.descNode = v
		case "failure_mode":
			h.failNode = v
			m, err := limits.ParseFailureMode(p.str(v, key))
			if err != nil {
				p.errorf(v, key, "%v", err)
			}
			h.failure = m
		case "override":
			h.overNode, h.over = v, p.override(v, key)
		case "time_zone":
			p.zone = p.timeZone(v, key)
		default:
			p.unknownField(k, key, key, fileFieldNames)
		}
	})
	return h
}

// merge sets the failure mode and override of file head h on its domain
// d, which other files of the domain may have set: they must agree.
func (p *parser) merge(d *limits.Domain, h fileHead) {
	if h.failure != limits.FailDefault {
		if d.FailureMode != limits.FailDefault && d.FailureMode != h.failure {
			p.errorf(h.failNode, "failure_mode", "%s, but another file of domain %q says %s", h.failure, h.domain, d.FailureMode)
		}
		d.FailureMode = h.failure
	}
	if over := h.over; over != nil {
		if over.Calendar != nil && over.Calendar.Location == nil {
			over.Calendar.Location = p.zone // the file's, wherever it says it
		}
		if d.Override != nil && !sameOverride(d.Override, over) {
			p.errorf(h.overNode, "override", "another file of domain %q sets a different override", h.domain)
		}
		d.Override = over
	}
}

// decode reads the one YAML document of data and returns its root node,
// or nil after recording why there is none.
func (p *parser) decode(data []byte) *yaml.Node {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		p.yamlError(err, data)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "", "a second YAML document; put each domain in its own file")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err, data)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.errorf(nil, "domain", "required, and the file is empty")
		return nil
	}
	return doc.Content[0]
}

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
