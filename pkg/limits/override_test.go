package limits_test

import (
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func TestParseOverrideKeys(t *testing.T) {
	tests := []struct {
		give string
		want limits.OverrideKeys
	}{
		{"shared", limits.OverrideShared},
		{"separate", limits.OverrideSeparate},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			var got limits.OverrideKeys
			if err := got.Set(tt.give); err != nil || got != tt.want {
				t.Fatalf("Set(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
			}
			if got.String() != tt.give {
				t.Errorf("String() = %q, want %q", got.String(), tt.give)
			}
		})
	}
	for _, give := range []string{"", "Shared", "own"} {
		if _, err := limits.ParseOverrideKeys(give); err == nil {
			t.Errorf("ParseOverrideKeys(%q): no error", give)
		}
	}
}
