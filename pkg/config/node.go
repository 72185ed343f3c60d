package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

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
