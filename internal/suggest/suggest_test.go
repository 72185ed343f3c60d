package suggest

import "testing"

// TestNearest: what counts as a slip of a command's name.
func TestNearest(t *testing.T) {
	names := []string{"check", "explain", "version", "help"}
	tests := []struct {
		give string
		want string // "" for no suggestion
	}{
		{"chek", "check"},   // a letter missing
		{"checkk", "check"}, // one too many
		{"cheque", ""},      // three edits
		{"cehck", "check"},  // neighbours swapped
		{"chcek", "check"},  // neighbours swapped
		{"xheck", "check"},  // one wrong
		{"explian", "explain"},
		{"expalin", "explain"},
		{"explnai", "explain"}, // two edits in a 7-letter word
		{"expxxxn", ""},        // three
		{"verison", "version"},
		{"vresion", "version"},
		{"ver", "version"}, // a prefix
		{"v", ""},          // too short a prefix to say
		{"e", ""},
		{"hlep", "help"},
		{"halp", "help"},
		{"serve", ""},
		{"run", ""},
		{"", ""},
		{"CHECK", ""}, // not one edit: bytes differ in case
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, ok := Nearest(tt.give, names)
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("Nearest(%q) = %q, %v; want %q", tt.give, got, ok, tt.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "acb", 1},
		{"abcd", "badc", 2},
		{"kitten", "sitting", 3},
		{"RLS_GRPC_ADR", "RLS_GRPC_ADDR", 1},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}
