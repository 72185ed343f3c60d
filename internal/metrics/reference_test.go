package metrics

import "testing"

// TestRefStatPath: the reference's stat path of a rule label is cut into
// key1 and key2 as its mapping cuts it, after the reference's own
// sanitizing of the name.
func TestRefStatPath(t *testing.T) {
	tests := []struct {
		give       string
		key1, key2 string
	}{
		{"user", "user", ""},
		{"tenant_acme.user", "tenant_acme", "user"},
		{"a.b.c", "a", "b"},
		{"remote_address_10.0.0.1", "remote_address_10_0_0_1", ""},
		{"path_/a:b|c", "path_/a_b_c", ""},
	}
	for _, tt := range tests {
		if k1, k2 := refKeys(tt.give); k1 != tt.key1 || k2 != tt.key2 {
			t.Errorf("refKeys(%q) = %q, %q; want %q, %q", tt.give, k1, k2, tt.key1, tt.key2)
		}
	}
}

// TestRefStatSuffixes: each of our per-rule counters that has a
// reference Prometheus name has its statsd name too.
func TestRefStatSuffixes(t *testing.T) {
	for name := range refRuleStats {
		if refStatSuffix[name] == "" {
			t.Errorf("%s has no statsd suffix", name)
		}
	}
	if len(refStatSuffix) != len(refRuleStats) {
		t.Errorf("%d statsd suffixes for %d per-rule counters", len(refStatSuffix), len(refRuleStats))
	}
}
