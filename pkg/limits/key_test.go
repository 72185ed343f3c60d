package limits_test

import (
	"slices"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// FuzzAppendKey checks that keys are injective: two different (domain,
// entries, limit) tuples never share a key, whatever bytes values hold.
// Descriptor values come from request headers, so a collision would let one
// client spend another's budget.
func FuzzAppendKey(f *testing.F) {
	f.Add("d", "a_b", "c", "", "", "d", "a", "b_c", "", "", uint8(1), uint8(1), false)
	f.Add("d", "k", "v}{", "k", "v", "d", "k", "v", "}{k", "v", uint8(2), uint8(2), true)
	f.Add("d1", "k", "1:x", "", "", "d", "1k", "x", "", "", uint8(1), uint8(1), false)
	// Pairs of tuples whose parts join to the same bytes, with or without
	// a separator: each collides if the length prefixes go, when a bare
	// ':' stays between the parts or when nothing does. A part boundary
	// moves between a key and its value, a value and the next key, the
	// domain and the first key, and across the hash tag's brace.
	f.Add("d", "a:b", "c", "", "", "d", "a", "b:c", "", "", uint8(0), uint8(0), true)
	f.Add("d", "ab", "c", "", "", "d", "a", "bc", "", "", uint8(0), uint8(0), true)
	f.Add("d", "k", "v", "a:b", "c", "d", "k", "v", "a", "b:c", uint8(1), uint8(1), true)
	f.Add("d", "k", "v", "ab", "c", "d", "k", "v", "a", "bc", uint8(1), uint8(1), true)
	f.Add("d", "k", "v", "w", "x:y", "d", "k", "v", "w:x", "y", uint8(1), uint8(1), true)
	f.Add("d:k", "v", "x", "", "", "d", "k:v", "x", "", "", uint8(0), uint8(0), true)
	f.Add("dk", "v", "x", "", "", "d", "kv", "x", "", "", uint8(0), uint8(0), true)
	f.Add("d", "k", "v}", "w", "x", "d", "k", "v", "}w", "x", uint8(1), uint8(1), true)
	fw, _ := limits.NewLimit(limits.FixedWindow, 1, limits.UnitSecond, 1, 0)
	tb, _ := limits.NewLimit(limits.TokenBucket, 1, limits.UnitSecond, 1, 0)
	f.Fuzz(func(t *testing.T, d1, k1, v1, k2, v2, d2, k3, v3, k4, v4 string, n1, n2 uint8, sameLimit bool) {
		e1 := []limits.Entry{{k1, v1}, {k2, v2}}[:1+n1%2]
		e2 := []limits.Entry{{k3, v3}, {k4, v4}}[:1+n2%2]
		l2 := tb
		if sameLimit {
			l2 = fw
		}
		a, slotA := limits.AppendKey(nil, d1, e1, fw)
		b, _ := limits.AppendKey(nil, d2, e2, l2)
		same := d1 == d2 && slices.Equal(e1, e2) && l2 == fw
		if (string(a) == string(b)) != same {
			t.Fatalf("keys %q and %q: equal = %v, but tuples equal = %v", a, b, string(a) == string(b), same)
		}
		// The slot part is the same for every limit of one descriptor,
		// and for every descriptor that shares the first entry.
		if aa, s := limits.AppendKey(nil, d1, e1, tb); string(aa[:s]) != string(a[:slotA]) {
			t.Fatalf("slot part differs between limits: %q vs %q", aa[:s], a[:slotA])
		}
		if aa, s := limits.AppendKey(nil, d1, e1[:1], tb); string(aa[:s]) != string(a[:slotA]) {
			t.Fatalf("slot part differs between [%v] and %v: %q vs %q", e1[0], e1, aa[:s], a[:slotA])
		}
	})
}
