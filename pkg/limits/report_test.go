package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// scripted is a store that answers every batch with fixed outcomes, as a
// store's middleware may: the memory and Redis stores never answer some
// of these (an unknown outcome, say), and the engine must report them
// all truthfully.
type scripted struct {
	outs     []limits.Outcome
	admitted bool
}

func (s scripted) Apply(_ context.Context, b *limits.Batch) error {
	b.Outcomes = append(b.Outcomes[:0], s.outs...)
	b.Admitted = s.admitted
	return nil
}

const reportRules = `
domain: edge
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: a}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10, name: b}
  - key: two
    rate_limits:
      - {unit: minute, requests_per_unit: 5, name: two_minute}
      - {unit: hour, requests_per_unit: 50, name: two_hour}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadow}
`

func reportRequest(keys ...string) *limits.Request {
	req := &limits.Request{Domain: "edge"}
	for _, k := range keys {
		req.Descriptors = append(req.Descriptors, limits.Descriptor{Entries: []limits.Entry{{Key: k, Value: "v"}}})
	}
	return req
}

// status is a limits.Status with the limit by name, for comparing.
type status struct {
	Code      limits.Code
	Limit     string // "" for none
	Remaining uint64
	Reset     time.Duration
	Unknown   bool
}

func statuses(d *limits.Decision) []status {
	var out []status
	for _, st := range d.Statuses {
		s := status{Code: st.Code, Remaining: st.Remaining, Reset: st.Reset, Unknown: st.Unknown}
		if st.Limit != nil {
			s.Limit = st.Limit.Name
		}
		out = append(out, s)
	}
	return out
}

// TestReport checks the statuses the engine reports from a store's
// outcomes: the limit that decided, with 0 remaining and its reset, and
// nothing it does not know.
func TestReport(t *testing.T) {
	const sec = time.Second
	over := func(rem uint64, reset time.Duration) limits.Outcome {
		return limits.Outcome{Over: true, Remaining: rem, Reset: reset}
	}
	ok := func(rem uint64, reset time.Duration) limits.Outcome {
		return limits.Outcome{Remaining: rem, Reset: reset}
	}
	unknown := limits.Outcome{Unknown: true}
	O, X := limits.OK, limits.OverLimit
	tests := []struct {
		name     string
		give     *limits.Request
		outs     []limits.Outcome
		admitted bool
		want     []status
	}{{
		// The limit is over for 3 hits with 2 left: it reports 0 left,
		// so that Envoy picks it before b, with 2 left too.
		name: "over reports nothing left",
		give: reportRequest("b", "a"),
		outs: []limits.Outcome{ok(2, 3000*sec), over(2, 50*sec)},
		want: []status{{O, "b", 2, 3000 * sec, false}, {X, "a", 0, 50 * sec, false}},
	}, {
		// Both over: a retry fails until the later one resets.
		name: "two limits over report the later reset",
		give: reportRequest("two"),
		outs: []limits.Outcome{over(0, 50*sec), over(0, 3000*sec)},
		want: []status{{X, "two_hour", 0, 3000 * sec, false}},
	}, {
		name: "two limits over report the later reset, in any order",
		give: reportRequest("two"),
		outs: []limits.Outcome{over(0, 3000*sec), over(0, 50*sec)},
		want: []status{{X, "two_minute", 0, 3000 * sec, false}},
	}, {
		// A store that answered without learning b's state (a deny cache
		// rejecting on a's cached verdict) says so: b reports no limit,
		// which Envoy skips, rather than "0 left, resets now".
		name: "unknown reports no limit",
		give: reportRequest("b", "a"),
		outs: []limits.Outcome{unknown, over(0, 50*sec)},
		want: []status{{O, "", 0, 0, true}, {X, "a", 0, 50 * sec, false}},
	}, {
		name:     "a known outcome wins over an unknown one",
		give:     reportRequest("two"),
		outs:     []limits.Outcome{unknown, ok(40, 3000*sec)},
		admitted: true,
		want:     []status{{O, "two_hour", 40, 3000 * sec, false}},
	}, {
		name: "a known outcome wins over a later unknown one",
		give: reportRequest("two"),
		outs: []limits.Outcome{over(0, 50*sec), unknown},
		want: []status{{X, "two_minute", 0, 50 * sec, false}},
	}, {
		// A shadow limit over on an admitted request previews "0 left",
		// as the reference reports it.
		name:     "shadow over, admitted",
		give:     reportRequest("shadow", "b"),
		outs:     []limits.Outcome{over(0, 50*sec), ok(9, 3000*sec)},
		admitted: true,
		want:     []status{{O, "shadow", 0, 50 * sec, false}, {O, "b", 9, 3000 * sec, false}},
	}, {
		// On a rejected request it would lead Envoy away from the limit
		// that decided: it reports nothing.
		name: "shadow over, rejected",
		give: reportRequest("shadow", "a"),
		outs: []limits.Outcome{over(0, 50*sec), over(0, 40*sec)},
		want: []status{{O, "", 0, 0, false}, {X, "a", 0, 40 * sec, false}},
	}, {
		// A shadow limit within its limit is reported as any other.
		name: "shadow within, rejected",
		give: reportRequest("shadow", "a"),
		outs: []limits.Outcome{ok(1, 50*sec), over(0, 40*sec)},
		want: []status{{O, "shadow", 1, 50 * sec, false}, {X, "a", 0, 40 * sec, false}},
	}}
	rs := parseRules(t, reportRules)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := limits.NewEngine(rs, scripted{tt.outs, tt.admitted}, limits.EngineOptions{})
			var d limits.Decision
			if err := e.Decide(context.Background(), tt.give, &d); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, statuses(&d)); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailClosedReset checks what a request rejected because the store
// cannot decide reports: a limit with nothing left and a reset of one
// second, never 0 (a client told "reset 0" retries at once).
func TestFailClosedReset(t *testing.T) {
	store := &storetest.Down{Up: memory.New(memory.Options{})}
	store.Down.Store(true)
	e := limits.NewEngine(parseRules(t, reportRules), store, limits.EngineOptions{FailureMode: limits.FailClosed})
	var d limits.Decision
	if err := e.Decide(context.Background(), reportRequest("b", "two"), &d); err != nil {
		t.Fatal(err)
	}
	want := []status{{limits.OverLimit, "b", 0, time.Second, false}, {limits.OverLimit, "two_minute", 0, time.Second, false}}
	if diff := cmp.Diff(want, statuses(&d)); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

// TestSizeOutcomes: one outcome per check, on the batch's own array once
// it is large enough, so that a reused batch allocates nothing.
func TestSizeOutcomes(t *testing.T) {
	var b limits.Batch
	b.Checks = make([]limits.Check, 3)
	b.SizeOutcomes()
	if len(b.Outcomes) != 3 {
		t.Fatalf("%d outcomes for 3 checks", len(b.Outcomes))
	}
	first := &b.Outcomes[0]
	b.Reset()
	b.Checks = append(b.Checks, limits.Check{}, limits.Check{})
	if n := testing.AllocsPerRun(100, b.SizeOutcomes); n != 0 {
		t.Errorf("SizeOutcomes allocated %v times on a reused batch", n)
	}
	if len(b.Outcomes) != 2 || &b.Outcomes[0] != first {
		t.Errorf("got %d outcomes on a new array, want 2 on the old one", len(b.Outcomes))
	}
}
