package limits

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FailureMode is what a request gets while the store cannot decide (it is
// unreachable, too slow, or its breaker is open).
type FailureMode uint8

// The failure modes. FailDefault, in a rule file, means "the engine's".
const (
	FailDefault FailureMode = iota
	// FailOpen admits the request; every descriptor reports no limit.
	FailOpen
	// FailClosed rejects the request. Each descriptor with limits reports
	// its first limit, with nothing remaining and a reset of ClosedReset.
	FailClosed
	// FailLocal decides on the local fallback store, with every limit
	// divided by the number of replicas expected to share the load.
	FailLocal
	// FailError fails the call (gRPC Unavailable) and leaves the choice to
	// Envoy's failure_mode_deny, as envoyproxy/ratelimit does.
	FailError
)

// ClosedReset is the reset that requests rejected by FailClosed report.
// When the store will decide again is unknown, but never sooner than it
// answers again, which may be at once; 0 would tell clients to retry at
// once, in a storm, and the limit's whole window could keep them out for
// up to a year after a short outage. One second is the shortest wait
// that Envoy's whole-second X-RateLimit-Reset can state, and within
// every limit's window (the shortest unit is a second). A client that
// retries each second while the store is down costs little: the answer
// is local, and the breaker keeps the store from being asked.
const ClosedReset = time.Second

var failureNames = [...]string{FailDefault: "", FailOpen: "open", FailClosed: "closed", FailLocal: "local", FailError: "error"}

// FailureModes lists the failure modes a flag or rule file can name.
var FailureModes = []FailureMode{FailOpen, FailClosed, FailLocal, FailError}

// ParseFailureMode parses "open", "closed", "local" or "error".
func ParseFailureMode(s string) (FailureMode, error) {
	for _, m := range FailureModes {
		if failureNames[m] == s {
			return m, nil
		}
	}
	return FailDefault, fmt.Errorf("unknown failure mode %q (want %s)", s, oneOf(FailureModes))
}

// Set parses s as ParseFailureMode does, so that a *FailureMode is a
// flag.Value.
func (m *FailureMode) Set(s string) error {
	v, err := ParseFailureMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

func (m FailureMode) String() string {
	if int(m) < len(failureNames) && m != FailDefault {
		return failureNames[m]
	}
	return "default"
}

// divided returns l with Requests and Burst divided by n (rounded down, but
// at least 1 unless l bans everything), for the local fallback: n replicas
// deciding alone should together admit no more than l.
func (l *Limit) divided(n uint64) *Limit {
	if n <= 1 || l.Unlimited {
		return l
	}
	c := *l
	if c.Requests > 0 {
		c.Requests = max(1, c.Requests/n)
	}
	if c.Burst > 0 {
		c.Burst = max(1, c.Burst/n)
	}
	return &c
}

// ApplyLocal decides b on the engine's local store, each limit divided
// by the replicas that share it, as failure mode local decides a request
// while the shared store cannot. It fails when the engine has no local
// store.
func (e *Engine) ApplyLocal(ctx context.Context, b *Batch) error {
	if e.local == nil {
		return errors.New("no local store for failure mode local")
	}
	for j := range b.Checks {
		b.Checks[j].Limit = b.Checks[j].Limit.divided(e.divisor)
	}
	return e.local.Apply(ctx, b)
}
