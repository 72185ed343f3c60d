package config

import (
	"strings"
	"testing"
)

// TestYAMLErrorLine parses broken files with yaml.v3 and checks that the
// problem is reported on the line it is on, wherever yaml.v3's message
// puts it.
func TestYAMLErrorLine(t *testing.T) {
	tests := []struct {
		name string
		give string
		want int
	}{
		{"unclosed [", "a: 1\nb: 2\nc: 3\nd: 4\ne: 5\nf: 6\ng: [1, 2\nh: 8\n", 7},
		{"unclosed {", "a: 1\nb: {c: 1\nd: 2\n", 2},
		{"tab in a scalar's indentation", "a:\n  - key: user\n\tb: 1\n", 3},
		{"tab before a key", "a: 1\nb: 2\nc:\n\td: 4\n", 4},
		{"tab on the first line", "\ta: 1\n", 1},
		{"key less indented", "a:\n  b: 1\n c: 2\n", 3},
		{"entry after a mapping", "a: 1\nb: 2\n- c\n", 3},
		{"key after a sequence", "- a\n- b\nc: d\n", 3},
		{"mapping in a value", "a: 1\nb: 2\nc: d: e\n", 3},
		{"unclosed quote", "a: 1\nb: 2\nc: \"abc\n", 3},
		{"unclosed [ on the first line", "[a\n", 1},
		{"unclosed [ on the only line, no newline", "overlays: [", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &parser{file: "f.yaml"}
			if p.decode([]byte(tt.give)) != nil || len(p.errs) != 1 {
				t.Fatalf("decoded, or %d problems: %v", len(p.errs), p.errs)
			}
			e := p.errs[0].(*Error)
			if e.Line != tt.want || !strings.HasPrefix(e.Msg, "invalid YAML: ") {
				t.Errorf("%s, want line %d", e, tt.want)
			}
		})
	}
}
