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

// TestScriptsUseOnlyPreludeCodes: the scripts name algorithms only by the
// prelude's constants, and define no algorithm codes of their own. A
// renamed or added algorithm, or a hand-written code, fails here rather
// than in production.
func TestScriptsUseOnlyPreludeCodes(t *testing.T) {
	defined := map[string]bool{"KEYS": true, "ARGV": true}
	for _, a := range limits.Algorithms {
		defined[luaName(a)] = true
	}
	// Upper-case constants the scripts define themselves.
	own := regexp.MustCompile(`(?m)^local ([A-Z_][A-Z0-9_]*(?:, *[A-Z_][A-Z0-9_]*)*) *=`)
	for _, src := range []string{libSrc, applySrc, refundSrc} {
		for _, m := range own.FindAllStringSubmatch(src, -1) {
			for name := range strings.SplitSeq(m[1], ",") {
				name = strings.TrimSpace(name)
				if defined[name] {
					t.Errorf("script redefines %s, which the prelude generates", name)
				}
				defined[name] = true
			}
		}
	}
	word := regexp.MustCompile(`\b[A-Z_][A-Z0-9_]*\b`)
	for name, src := range map[string]string{"lib.lua": libSrc, "apply.lua": applySrc, "refund.lua": refundSrc} {
		for _, line := range strings.Split(code(src), "\n") {
			for _, w := range word.FindAllString(line, -1) {
				if len(w) > 1 && !defined[w] {
					t.Errorf("%s uses %s, which neither the prelude nor the scripts define: %q", name, w, strings.TrimSpace(line))
				}
			}
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
	l.Shadow = true
	rec := appendCheck(nil, &limits.Check{Limit: l, Hits: 3, Extra: 5})
	if len(rec) != checkSize {
		t.Fatalf("record of %d bytes, want checkSize %d", len(rec), checkSize)
	}
	src := prelude() + libSrc + `
local out = {CHECK, #ARGV[1]}
for _, v in ipairs({sunpack(SPEC, ARGV[1])}) do
  out[#out + 1] = v
end
return out`
	got, err := rc.Eval(context.Background(), src, nil, rec).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	// CHECK and the record's length, then its fields and the position
	// after them.
	want := []int64{checkSize, checkSize, int64(limits.LeakyBucket), 1, 7, 120_000_000, l.Tick(), 9, 3, 5, checkSize + 1}
	if !slices.Equal(got, want) {
		t.Errorf("Lua reads %v, want %v", got, want)
	}
}
