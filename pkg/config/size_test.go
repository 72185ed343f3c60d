package config_test

import (
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// TestCheckSizeLargePlain checks that the alias budget counts only nodes
// reached through aliases: a file that writes out more nodes than the
// budget, with no aliases, passes (its cost is bounded by its size).
func TestCheckSizeLargePlain(t *testing.T) {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for range config.MaxExpandedNodes + 10 {
		seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "x"})
	}
	if n, msg := config.CheckSize(seq); n != nil {
		t.Fatalf("CheckSize refused a plain sequence of %d scalars: %s", len(seq.Content), msg)
	}
}
