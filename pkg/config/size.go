package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// MaxDepth is how deeply a rule file's YAML may nest (mappings and
// sequences counted alike); a descriptor level takes two. Real configs stay
// well under ten descriptor levels.
const MaxDepth = 64

// MaxDescriptorLevels is how deeply descriptors may nest within
// MaxDepth: the mapping of a descriptor at level L (1 at the top) is 2L
// deep and its fields one deeper.
const MaxDescriptorLevels = (MaxDepth - 2) / 2

// MaxExpandedNodes bounds the YAML nodes reached through aliases, counted
// at every use. The parser walks an alias's target at every use, so an
// anchor used ten times at each of nine levels would cost 10^9 visits.
// Nodes written out in the file are not counted: their cost is bounded by
// the file's size, so a large file without aliases is never refused.
const MaxExpandedNodes = 1 << 20

// checkSize walks root as the parser will, aliases expanded, and returns
// the first node past MaxDepth or MaxExpandedNodes with the reason, or nil.
func checkSize(root *yaml.Node) (*yaml.Node, string) {
	n, msg, _ := measure(root)
	return n, msg
}

// measure is checkSize, also reporting whether root holds an alias.
func measure(root *yaml.Node) (bad *yaml.Node, msg string, aliases bool) {
	visited := 0
	var walk func(n *yaml.Node, depth int, expanded bool) (*yaml.Node, string)
	walk = func(n *yaml.Node, depth int, expanded bool) (*yaml.Node, string) {
		if expanded {
			visited++
		}
		if visited > MaxExpandedNodes {
			return n, fmt.Sprintf("more than %d YAML nodes reached through aliases", MaxExpandedNodes)
		}
		if depth > MaxDepth {
			return n, fmt.Sprintf("nested more than %d levels deep", MaxDepth)
		}
		if n.Kind == yaml.AliasNode {
			aliases = true
		}
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			// Name the outermost alias: the one the author should look at.
			if bad, msg := walk(n.Alias, depth, true); bad != nil {
				return n, msg
			}
			return nil, ""
		}
		for _, c := range n.Content {
			if bad, msg := walk(c, depth+1, expanded); bad != nil {
				return bad, msg
			}
		}
		return nil, ""
	}
	bad, msg = walk(root, 0, false)
	return bad, msg, aliases
}
