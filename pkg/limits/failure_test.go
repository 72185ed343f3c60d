package limits_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

const failureRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 4}
`

func decideN(t *testing.T, e *limits.Engine, domain string, n int) []limits.Code {
	t.Helper()
	var codes []limits.Code
	for range n {
		var d limits.Decision
		err := e.Decide(context.Background(), &limits.Request{Domain: domain, Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		codes = append(codes, d.Code)
	}
	return codes
}

func TestFailureModes(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	O, X := limits.OK, limits.OverLimit
	tests := []struct {
		mode    limits.FailureMode
		divisor uint64
		want    []limits.Code
	}{
		{limits.FailOpen, 1, []limits.Code{O, O, O, O, O, O}},
		{limits.FailClosed, 1, []limits.Code{X, X}},
		{limits.FailLocal, 1, []limits.Code{O, O, O, O, X}},
		// Two replicas share the limit of 4: each admits 2 alone.
		{limits.FailLocal, 2, []limits.Code{O, O, X}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode, "/", tt.divisor), func(t *testing.T) {
			rs := parseRules(t, failureRules)
			store := &storetest.Down{Up: memory.New(memory.Options{Now: clk.Now})}
			store.Down.Store(true)
			e := limits.NewEngine(rs, store, limits.EngineOptions{FailureMode: tt.mode, Local: memory.New(memory.Options{Now: clk.Now}), LocalDivisor: tt.divisor})
			got := decideN(t, e, "edge", len(tt.want))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("codes = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("error", func(t *testing.T) {
		store := &storetest.Down{Up: memory.New(memory.Options{})}
		store.Down.Store(true)
		e := limits.NewEngine(parseRules(t, failureRules), store, limits.EngineOptions{FailureMode: limits.FailError})
		var d limits.Decision
		err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d)
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Errorf("err = %v, want one wrapping ErrStoreUnavailable", err)
		}
	})

	t.Run("open reports no limit", func(t *testing.T) {
		store := &storetest.Down{Up: memory.New(memory.Options{})}
		store.Down.Store(true)
		e := limits.NewEngine(parseRules(t, failureRules), store, limits.EngineOptions{FailureMode: limits.FailOpen})
		var d limits.Decision
		if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}, &d); err != nil {
			t.Fatal(err)
		}
		if d.Statuses[0].Limit != nil || d.StoreErr == nil || d.Fallback != limits.FailOpen {
			t.Errorf("status %+v, store error %v, fallback %v; want no limit, the error, open", d.Statuses[0], d.StoreErr, d.Fallback)
		}
	})
}

func TestFailureModePerDomain(t *testing.T) {
	files := []config.File{
		{Name: "open.yaml", Data: []byte("domain: a\nfailure_mode: closed\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &storetest.Down{Up: memory.New(memory.Options{})}
	store.Down.Store(true)
	e := limits.NewEngine(rs, store, limits.EngineOptions{FailureMode: limits.FailOpen})
	if got := decideN(t, e, "a", 1); got[0] != limits.OverLimit {
		t.Errorf("domain a (failure_mode: closed) = %v, want OVER_LIMIT", got)
	}
	if got := decideN(t, e, "b", 1); got[0] != limits.OK {
		t.Errorf("domain b (engine default open) = %v, want OK", got)
	}
}

func parseRules(t *testing.T, yaml string) *limits.Ruleset {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(yaml)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestFailureModeFlag: a *FailureMode is a flag.Value: it takes each
// mode's name, keeps its value on a bad one, and shows its default.
func TestFailureModeFlag(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m := limits.FailLocal
	fs.Var(&m, "failure-mode", "")
	if got := fs.Lookup("failure-mode").DefValue; got != "local" {
		t.Errorf("default shown as %q, want local", got)
	}
	for _, want := range limits.FailureModes {
		if err := fs.Set("failure-mode", want.String()); err != nil || m != want {
			t.Errorf("Set(%q) = %v, mode %v", want, err, m)
		}
	}
	if err := fs.Parse([]string{"--failure-mode=shut"}); err == nil || !strings.Contains(err.Error(), `unknown failure mode "shut"`) {
		t.Errorf("--failure-mode=shut: error %v, want it to name the mode", err)
	}
	if m != limits.FailError {
		t.Errorf("mode after a bad value = %v, want the last good one, error", m)
	}
}
