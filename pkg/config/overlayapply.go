package config

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Overlaid is what applying an overlay gave: the rule files with the
// overlay applied, the entries that matched nothing, and who set what, to
// blame a problem in the result on the entry that caused it.
type Overlaid struct {
	// Files are the rule documents with the overlay applied. A document
	// the overlay changed has the overlay's checksum added to its Data,
	// so that Checksum(Files) changes with the overlay.
	Files []File
	// Unmatched lists the entries that matched nothing, each an *Error
	// naming the overlay file, the entry's line and path, and why.
	Unmatched []error
	// touched maps a document's name to the descriptors the overlay set
	// fields of (their YAML paths, "" for the domain) and who set them.
	touched map[string]map[string]*overlayEntry
	file    string
}

// Apply applies the overlay to files, rule documents given as YAML nodes
// (File.Root), whose nodes it changes: the caller renders them anew for
// each Apply. A nil overlay changes nothing. The entries apply in order:
// where two set one field, the later wins.
func (o *Overlay) Apply(files []File) *Overlaid {
	a := &Overlaid{Files: files, touched: map[string]map[string]*overlayEntry{}}
	if o == nil {
		return a
	}
	a.file = o.File
	changed := make([]bool, len(files))
	idx := levelIndex{}
	for _, e := range o.entries {
		why := fmt.Sprintf("no rules of domain %q", e.domain)
		matched := false
		for i, f := range files {
			if f.Root == nil || f.Root.Kind != yaml.MappingNode || scalarOf(get(f.Root, "domain")) != e.domain {
				continue
			}
			targets, reason := e.targets(f.Root, idx)
			if len(targets) == 0 {
				why = reason
				continue
			}
			for path, d := range targets {
				e.apply(f.Root, d)
				a.touch(f.Name, path, e)
			}
			matched, changed[i] = true, true
		}
		if !matched {
			a.Unmatched = append(a.Unmatched, &Error{File: o.File, Line: e.line, Path: e.where(), Msg: "matches nothing: " + why})
		}
	}
	for i := range files {
		if changed[i] {
			files[i].Data = append(files[i].Data[:len(files[i].Data):len(files[i].Data)], "\x00overlay "+o.Checksum...)
		}
	}
	return a
}

func (a *Overlaid) touch(file, path string, e *overlayEntry) {
	if a.touched[file] == nil {
		a.touched[file] = map[string]*overlayEntry{}
	}
	a.touched[file][path] = e
}

// targets returns the descriptor mappings of root that e sets fields of,
// by their YAML paths (the root itself at "" for a domain-only entry), or
// none and why.
func (e *overlayEntry) targets(root *yaml.Node, idx levelIndex) (map[string]*yaml.Node, string) {
	switch {
	case e.path != nil:
		return e.byPath(root, idx)
	case e.name != "":
		out := map[string]*yaml.Node{}
		walkDescriptors(get(root, "descriptors"), "descriptors", func(path string, d *yaml.Node) {
			if l := get(d, "rate_limit"); l != nil && scalarOf(get(l, "name")) == e.name {
				out[path] = d
			}
		})
		if len(out) == 0 {
			return nil, fmt.Sprintf("no rate_limit of domain %q is named %q", e.domain, e.name)
		}
		return out, ""
	}
	return map[string]*yaml.Node{"": root}, ""
}

// levelIndex indexes the descriptors of each level an overlay looks in
// by key and value, so that N entries on a level of M descriptors cost
// N+M, not N*M. The first of a key and value wins, as in matching.
type levelIndex map[*yaml.Node]map[overlayStep]int

// find returns the index in level of the descriptor with s's key and
// value, or -1.
func (idx levelIndex) find(level *yaml.Node, s overlayStep) int {
	if level == nil || level.Kind != yaml.SequenceNode {
		return -1
	}
	m, ok := idx[level]
	if !ok {
		m = make(map[overlayStep]int, len(level.Content))
		for j, item := range level.Content {
			item = deref(item)
			k := overlayStep{scalarOf(get(item, "key")), scalarOf(get(item, "value"))}
			if _, dup := m[k]; !dup && item.Kind == yaml.MappingNode {
				m[k] = j
			}
		}
		idx[level] = m
	}
	if j, ok := m[s]; ok {
		return j
	}
	return -1
}

// byPath finds the descriptor at the end of e's path.
func (e *overlayEntry) byPath(root *yaml.Node, idx levelIndex) (map[string]*yaml.Node, string) {
	level, at := get(root, "descriptors"), "descriptors"
	var d *yaml.Node
	for i, s := range e.path {
		d = nil
		if j := idx.find(level, s); j >= 0 {
			d, at = deref(level.Content[j]), fmt.Sprintf("%s[%d]", at, j)
		}
		if d == nil {
			under := "at the top level"
			if i > 0 {
				under = "under " + strings.TrimSuffix(at, ".descriptors")
			}
			return nil, fmt.Sprintf("path[%d]: no descriptor with key %q and %s %s of domain %q", i, s.key, valueText(s.value), under, e.domain)
		}
		level, at = get(d, "descriptors"), at+".descriptors"
	}
	return map[string]*yaml.Node{strings.TrimSuffix(at, ".descriptors"): d}, ""
}

func valueText(v string) string {
	if v == "" {
		return "no value"
	}
	return fmt.Sprintf("value %q", v)
}

// apply sets e's fields on d, a descriptor mapping, and its domain's
// failure_mode on root; its override on d, which is root for an entry
// without path or name.
func (e *overlayEntry) apply(root, d *yaml.Node) {
	if e.failure != nil {
		set(root, "failure_mode", e.failure)
	}
	if e.override != nil {
		// Without path or name, d is root: the domain's.
		set(d, "override", e.override)
	}
	if d == root {
		return
	}
	for i := 0; i+1 < len(e.fields); i += 2 {
		set(d, e.fields[i].Value, e.fields[i+1])
	}
	limit := get(d, "rate_limit")
	if e.limit != nil {
		merged := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if limit != nil && limit.Kind == yaml.MappingNode {
			merged.Content = append(merged.Content, limit.Content...)
		}
		for i := 0; i+1 < len(e.limit.Content); i += 2 {
			set(merged, e.limit.Content[i].Value, e.limit.Content[i+1])
		}
		limit = merged
		set(d, "rate_limit", limit)
	}
	if e.add == nil {
		return
	}
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if old := get(d, "rate_limits"); old != nil && old.Kind == yaml.SequenceNode {
		list.Content = append(list.Content, old.Content...)
	}
	if limit != nil {
		list.Content = append(list.Content, limit)
		remove(d, "rate_limit")
	}
	list.Content = append(list.Content, e.add.Content...)
	set(d, "rate_limits", list)
}

// Blame returns err, a parse error of a.Files, with each problem inside
// what the overlay set naming the overlay entry that set it: the rules
// the control plane sent may be good, and the overlay not fit them.
func (a *Overlaid) Blame(err error) error {
	if err == nil || len(a.touched) == 0 {
		return err
	}
	var out []error
	for _, pe := range Problems(err) {
		var ce *Error
		if !errors.As(pe, &ce) {
			out = append(out, pe)
			continue
		}
		if e := a.setter(ce); e != nil {
			c := *ce
			c.Msg = fmt.Sprintf("%s (with %s:%d %s)", c.Msg, a.file, e.line, e.where())
			pe = &c
		}
		out = append(out, pe)
	}
	return errors.Join(out...)
}

// setter returns the entry that set fields of the descriptor a problem
// is in, or nil.
func (a *Overlaid) setter(ce *Error) *overlayEntry {
	byPath := a.touched[ce.File]
	if e, ok := byPath[""]; ok && (strings.HasPrefix(ce.Path, "failure_mode") || strings.HasPrefix(ce.Path, "override")) {
		return e
	}
	for path, e := range byPath {
		if path != "" && (ce.Path == path || strings.HasPrefix(ce.Path, path+".rate_limit") || strings.HasPrefix(ce.Path, path+".") && !strings.HasPrefix(ce.Path, path+".descriptors")) {
			return e
		}
	}
	return nil
}

// walkDescriptors calls fn for every descriptor mapping in the list n
// at path, depth first.
func walkDescriptors(n *yaml.Node, path string, fn func(path string, d *yaml.Node)) {
	if n == nil || n.Kind != yaml.SequenceNode {
		return
	}
	for i, item := range n.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			continue
		}
		ip := fmt.Sprintf("%s[%d]", path, i)
		fn(ip, item)
		walkDescriptors(get(item, "descriptors"), ip+".descriptors", fn)
	}
}

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return deref(m.Content[i+1])
		}
	}
	return nil
}

// set makes value the value of key in mapping m, replacing the old one
// in place or adding the field last.
func set(m *yaml.Node, key string, value *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = value
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value)
}

// remove drops key from mapping m.
func remove(m *yaml.Node, key string) {
	out := m.Content[:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			out = append(out, m.Content[i], m.Content[i+1])
		}
	}
	m.Content = out
}

// scalarOf is n's text if it is a scalar, else "".
func scalarOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return ""
	}
	return n.Value
}
