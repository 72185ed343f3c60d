package config

import (
	"strconv"

	"gopkg.in/yaml.v3"
)

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
