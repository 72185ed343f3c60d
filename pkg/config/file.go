package config

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
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
