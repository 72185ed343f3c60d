package redis

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestScriptAlgorithmCodes: in the scripts as loaded, each algorithm's
// constant holds the Go value of that algorithm, whatever order the Go
// constants are declared in, and nothing after the prelude redefines it.
func TestScriptAlgorithmCodes(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	for _, a := range limits.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			name := luaName(a)
			if !regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(name) {
				t.Fatalf("constant %q is not a Lua name", name)
			}
			// The prelude and lib.lua as the scripts load them.
			src := prelude() + libSrc + "return " + name
			got, err := rc.Eval(context.Background(), src, nil, "").Int64()
			if err != nil {
				t.Fatal(err)
			}
			if got != int64(a) {
				t.Errorf("Lua %s = %d, want %d (limits.%s)", name, got, a, a)
			}
		})
	}
}

// TestScriptsUseOnlyPreludeCodes: the scripts name algorithms, modes and
// the check record only by the prelude's constants, and define none of
// their own. A renamed or added algorithm, or a hand-written code, fails
// here rather than in production.
func TestScriptsUseOnlyPreludeCodes(t *testing.T) {
	defined := map[string]bool{"KEYS": true, "ARGV": true}
	// Upper-case constants, as the prelude and the scripts define them.
	own := regexp.MustCompile(`(?m)^local ([A-Z_][A-Z0-9_]*(?:, *[A-Z_][A-Z0-9_]*)*) *=`)
	names := func(src string) []string {
		var ns []string
		for _, m := range own.FindAllStringSubmatch(src, -1) {
			for name := range strings.SplitSeq(m[1], ",") {
				ns = append(ns, strings.TrimSpace(name))
			}
		}
		return ns
	}
	for _, name := range names(prelude()) {
		defined[name] = true
	}
	for _, a := range limits.Algorithms {
		if !defined[luaName(a)] {
			t.Errorf("the prelude does not define %s", luaName(a))
		}
	}
	for _, src := range []string{libSrc, fastSrc, applySrc, refundSrc} {
		for _, name := range names(src) {
			if defined[name] {
				t.Errorf("script redefines %s, which the prelude generates", name)
			}
			defined[name] = true
		}
	}
	word := regexp.MustCompile(`\b[A-Z_][A-Z0-9_]*\b`)
	for name, src := range map[string]string{"lib.lua": libSrc, "fast.lua": fastSrc, "apply.lua": applySrc, "refund.lua": refundSrc} {
		for _, line := range strings.Split(code(src), "\n") {
			for _, w := range word.FindAllString(line, -1) {
				if len(w) > 1 && !defined[w] {
					t.Errorf("%s uses %s, which neither the prelude nor the scripts define: %q", name, w, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestScriptModes: the prelude's modes are Go's, and apply.lua compares
// its mode argument only with them, never with a literal of its own.
func TestScriptModes(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	got, err := rc.Eval(context.Background(), prelude()+libSrc+"return {MODE_APPLY, MODE_RESERVE, MODE_REPORT, MODE_FAST}", nil, "").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{modeApply, modeReserve, modeReport, modeFast}; !slices.Equal(got, want) {
		t.Errorf("Lua modes %q, want Go's %q", got, want)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(got)))) != 4 {
		t.Errorf("modes %q are not distinct", got)
	}
	src := regexp.MustCompile(`--[^\n]*`).ReplaceAllString(fastSrc+applySrc, "")
	uses := regexp.MustCompile(`callMode\s*[=~]=\s*(\S+)`).FindAllStringSubmatch(src, -1)
	if len(uses) == 0 {
		t.Fatal("apply.lua never compares callMode (ARGV[2]): the test no longer finds the mode")
	}
	for _, m := range uses {
		if !strings.HasPrefix(m[1], "MODE_") {
			t.Errorf("apply.lua compares its mode with %s, not a prelude MODE_ constant: %q", m[1], m[0])
		}
	}
}

// code returns Lua source without comments and string literals, which
// may hold upper-case words that are not names.
func code(src string) string {
	src = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(src, "")
	return regexp.MustCompile(`'[^'\n]*'|"[^"\n]*"`).ReplaceAllString(src, "''")
}

// TestScriptDivision: lib.lua divides integers as floor(a / b) and
// ceil(a / b) on doubles, which it argues are exact below 2^53. Check
// the quotients closest to an integer, where rounding would show, against
// Go's integer division.
func TestScriptDivision(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	const top = int64(1) << 53
	var args []any
	for _, b := range []int64{1, 2, 3, 7, 10, 1000, 999_999, 1_000_000, 60_000_000, 1<<26 + 1, 1 << 40, top/3 + 1, top - 1} {
		for _, q := range []int64{0, 1, 2, 1000, (top - 1) / b} {
			for _, a := range []int64{q*b - 1, q * b, q*b + 1, q*b + b - 1} {
				if a >= 0 && a < top {
					args = append(args, a, b)
				}
			}
		}
	}
	src := prelude() + libSrc + `
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = str(floor(a / b))
  out[#out + 1] = str(ceil(a / b))
end
return out`
	got, err := rc.Eval(context.Background(), src, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(args); i += 2 {
		a, b := args[i].(int64), args[i+1].(int64)
		floor, ceil := a/b, (a+b-1)/b
		if got[i] != strconv.FormatInt(floor, 10) || got[i+1] != strconv.FormatInt(ceil, 10) {
			t.Errorf("%d / %d: Lua floor %s ceil %s, want %d and %d", a, b, got[i], got[i+1], floor, ceil)
		}
	}
}

// TestScriptCheckRecord: Go packs a check into the record lib.lua unpacks,
// of the size both sides assume.
func TestScriptCheckRecord(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	l, err := limits.NewLimit(limits.LeakyBucket, 7, limits.UnitMinute, 2, 9)
	if err != nil {
		t.Fatal(err)
	}
	rec := appendCheck(nil, &limits.Check{Limit: l, Hits: 3, Extra: 5, Group: 3}, 70_000, 0)
	if len(rec) != checkSize {
		t.Fatalf("record of %d bytes, want checkSize %d", len(rec), checkSize)
	}
	src := prelude() + libSrc + `
local out = {CHECK, #ARGV[1], struct.size(SPEC)}
for _, v in ipairs({sunpack(SPEC, ARGV[1])}) do
  out[#out + 1] = v
end
return out`
	got, err := rc.Eval(context.Background(), src, nil, rec).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	// CHECK, the record's length and SPEC's, then its fields and the
	// position after them.
	want := []int64{checkSize, checkSize, checkSize, int64(limits.LeakyBucket), checkQuota, 7, 120_000_000, l.Tick(), 9, 3, 5, 3, 70_000, checkSize + 1}
	if !slices.Equal(got, want) {
		t.Errorf("Lua reads %v, want %v", got, want)
	}
}
