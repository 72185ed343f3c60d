package limits_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func userRequest(descriptors int) *limits.Request {
	req := &limits.Request{Domain: "edge"}
	for range descriptors {
		req.Descriptors = append(req.Descriptors, limits.Descriptor{Entries: []limits.Entry{{Key: "user", Value: "u1"}}})
	}
	return req
}

// TestZeroEngineOptions checks that the zero EngineOptions means the
// defaults, as documented: a zero RequestLimits once rejected every
// request.
func TestZeroEngineOptions(t *testing.T) {
	rs := parseRules(t, failureRules)
	e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
	var d limits.Decision
	if err := e.Decide(context.Background(), userRequest(2), &d); err != nil {
		t.Fatalf("zero options: %v, want a decision", err)
	}
	if d.Code != limits.OK || len(d.Statuses) != 2 || d.Statuses[0].Limit == nil {
		t.Errorf("zero options: code %v, statuses %+v; want OK with the user limit", d.Code, d.Statuses)
	}
	if got := e.FailureMode("edge"); got != limits.FailLocal {
		t.Errorf("zero options: failure mode %v, want local", got)
	}

	// A field that is set is used; the others keep their defaults.
	e = limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{Limits: limits.RequestLimits{MaxDescriptors: 1}})
	err := e.Decide(context.Background(), userRequest(2), &d)
	var re *limits.RequestError
	if !errors.As(err, &re) || re.Field != "descriptors" {
		t.Errorf("MaxDescriptors 1, two descriptors: err = %v, want a RequestError on descriptors", err)
	}
	req := userRequest(1)
	req.Descriptors[0].Entries[0].Value = strings.Repeat("v", limits.DefaultRequestLimits.MaxValueBytes+1)
	if err := e.Decide(context.Background(), req, &d); !errors.As(err, &re) {
		t.Errorf("value over the default MaxValueBytes: err = %v, want a RequestError", err)
	}
}

// TestFailLocalWithoutLocalStore checks the documented zero value of
// EngineOptions.Local: failure mode local without a local store fails the
// call as failure mode error does.
func TestFailLocalWithoutLocalStore(t *testing.T) {
	store := &storetest.Down{Up: memory.New(memory.Options{})}
	store.Down.Store(true)
	e := limits.NewEngine(parseRules(t, failureRules), store, limits.EngineOptions{FailureMode: limits.FailLocal})
	var d limits.Decision
	if err := e.Decide(context.Background(), userRequest(1), &d); !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("err = %v, want the store's error", err)
	}
}

func TestFailingDomains(t *testing.T) {
	files := []config.File{
		{Name: "a.yaml", Data: []byte("domain: a\nfailure_mode: error\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
		{Name: "c.yaml", Data: []byte("domain: c\nfailure_mode: local\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 4}\n")},
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give limits.FailureMode
		want string
	}{
		{limits.FailLocal, "a"},
		{limits.FailError, "a b"},
		{limits.FailOpen, "a"},
	}
	for _, tt := range tests {
		e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{FailureMode: tt.give})
		if got := strings.Join(e.FailingDomains(), " "); got != tt.want {
			t.Errorf("engine failure mode %v: failing domains %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestParseErrorsNameEveryChoice checks that the Parse functions' errors
// list every valid name, from the same tables they parse with.
func TestParseErrorsNameEveryChoice(t *testing.T) {
	_, err := limits.ParseAlgorithm("nope")
	for _, a := range limits.Algorithms {
		if !strings.Contains(err.Error(), a.String()) {
			t.Errorf("ParseAlgorithm error %q does not name %s", err, a)
		}
	}
	_, err = limits.ParseUnit("nope")
	for _, u := range limits.Units {
		if !strings.Contains(err.Error(), u.String()) {
			t.Errorf("ParseUnit error %q does not name %s", err, u)
		}
	}
	_, err = limits.ParseFailureMode("nope")
	for _, m := range limits.FailureModes {
		if !strings.Contains(err.Error(), m.String()) {
			t.Errorf("ParseFailureMode error %q does not name %s", err, m)
		}
		if got, err := limits.ParseFailureMode(m.String()); err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := limits.ParseFailureMode(""); err == nil {
		t.Error(`ParseFailureMode("") succeeded, want an error`)
	}
	if got := limits.UnitNames(); got != "second, minute, hour, day, week, month or year" {
		t.Errorf("UnitNames() = %q", got)
	}
}
