package redis

import (
	"context"
	"regexp"
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
