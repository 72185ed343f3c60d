package limits

import (
	"fmt"
)

// Algorithm is how a limit counts requests.
type Algorithm uint8

// The algorithms. FixedWindow is the zero value and the default, as in
// envoyproxy/ratelimit.
const (
	// FixedWindow counts hits in epoch-aligned windows of Limit.Window.
	FixedWindow Algorithm = iota
	// SlidingWindow weighs the previous fixed window's count by the part of
	// it still inside the sliding window: estimate = prev × (1 − elapsed/W) +
	// current.
	SlidingWindow
	// SlidingLog remembers every admitted hit and counts those in the last
	// window exactly.
	SlidingLog
	// TokenBucket refills continuously at Requests per Window up to Burst
	// tokens; a hit takes a token.
	TokenBucket
	// LeakyBucket is the leaky bucket as a meter (GCRA): each hit adds one
	// emission interval (Window/Requests) to a backlog that drains in real
	// time, and a hit is admitted while the backlog stays within Burst
	// intervals.
	LeakyBucket
	// Concurrency counts requests in flight, not hits: a request takes a
	// slot, named by its hold (Check.Hold), while fewer than Requests are
	// taken; a refund with that hold frees it, and a slot that is never
	// freed expires one Window after it was taken. See Limit.Occupy.
	Concurrency
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	Concurrency:   "concurrency",
}

// Algorithms lists every algorithm that counts hits, for tests and
// documentation: all but Concurrency, which counts requests by their
// holds.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, LeakyBucket}

// AllAlgorithms is Algorithms and Concurrency.
var AllAlgorithms = append(Algorithms[:len(Algorithms):len(Algorithms)], Concurrency)

// ParseAlgorithm parses an algorithm name such as "token_bucket".
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want %s)", s, oneOf(AllAlgorithms))
}

// String returns the algorithm's configuration name.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// Bucketed reports whether the algorithm uses Burst.
func (a Algorithm) Bucketed() bool { return a == TokenBucket || a == LeakyBucket }

// Leasable reports whether a limit of the algorithm may be leased (see
// Limit.Lease): every algorithm that keeps a count, not a log nor slots.
func (a Algorithm) Leasable() bool {
	return a != SlidingLog && a != Concurrency && int(a) < len(algorithmNames)
}

// LeasableNames lists the leasable algorithms for messages.
func LeasableNames() string {
	var ls []Algorithm
	for _, a := range Algorithms {
		if a.Leasable() {
			ls = append(ls, a)
		}
	}
	return oneOf(ls)
}
