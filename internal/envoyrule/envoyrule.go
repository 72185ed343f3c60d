// Package envoyrule is test support: Envoy's rule for choosing, among a
// response's descriptor statuses, the one its X-RateLimit-* headers
// describe, and the one table of requests that every decision path must
// answer truthfully under that rule (see Run), as storetest holds the
// algorithm cases.
//
// The rule is that of Envoy's rate limit filter with
// enable_x_ratelimit_headers (XRateLimitHeaderUtils::create in
// source/extensions/filters/http/ratelimit/ratelimit_headers.cc): over the
// statuses in order, skip those without current_limit, and take the first
// with the strictly lowest limit_remaining. X-RateLimit-Limit is its
// requests_per_unit (followed by a quota policy of every status),
// X-RateLimit-Remaining its limit_remaining, and X-RateLimit-Reset the
// whole seconds of its duration_until_reset, truncated.
package envoyrule

import (
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Selected is what Envoy writes into the X-RateLimit-* headers: the
// status it chose and the values it reads from it.
type Selected struct {
	Index     int    // of the status in RateLimitResponse.Statuses
	Name      string // current_limit.name
	Limit     uint32 // X-RateLimit-Limit: current_limit.requests_per_unit
	Unit      rlsv3.RateLimitResponse_RateLimit_Unit
	Remaining uint32 // X-RateLimit-Remaining
	Reset     int64  // X-RateLimit-Reset: duration_until_reset.seconds
}

// Select returns the status Envoy's headers describe. It reports false
// when no status has a current_limit; Envoy then adds no X-RateLimit
// header.
func Select(resp *rlsv3.RateLimitResponse) (Selected, bool) {
	best := -1
	for i, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if best < 0 || st.GetLimitRemaining() < resp.Statuses[best].GetLimitRemaining() {
			best = i
		}
	}
	if best < 0 {
		return Selected{}, false
	}
	st := resp.Statuses[best]
	return Selected{
		Index:     best,
		Name:      st.GetCurrentLimit().GetName(),
		Limit:     st.GetCurrentLimit().GetRequestsPerUnit(),
		Unit:      st.GetCurrentLimit().GetUnit(),
		Remaining: st.GetLimitRemaining(),
		Reset:     st.GetDurationUntilReset().GetSeconds(),
	}, true
}

// Window returns the seconds of unit, the longest a reset of a limit of
// that unit (unit_multiplier 1) can honestly be.
func Window(unit rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	return int64(limits.Unit(unit).Duration() / time.Second)
}

// Problems returns what in resp would mislead a client that follows
// Envoy's headers, one sentence each; none for a truthful response:
//
//   - A rejected response leads Envoy to a status: one with 0 remaining
//     and a reset of at least one whole second, within its unit, since a
//     client told "reset 0" retries at once.
//   - Every OVER_LIMIT status names its limit, reports 0 remaining (a
//     later status with 0 left would otherwise not be chosen over an
//     earlier one that is not over), and a reset of 1 s to one unit.
//   - No status with a current_limit says "0 remaining, resets now" in
//     the whole seconds that Envoy reads.
//   - On a rejected response, no status with a current_limit reports a
//     reset of 0 unless its limit is full (nothing to reset): such a
//     status is never chosen, but it states what no store knows.
func Problems(resp *rlsv3.RateLimitResponse) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	rejected := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
	if sel, ok := Select(resp); rejected && !ok {
		add("rejected, but no status has a current_limit: Envoy adds no X-RateLimit header")
	} else if rejected {
		if sel.Remaining != 0 {
			add("rejected, but Envoy selects status %d (%q) with %d remaining", sel.Index, sel.Name, sel.Remaining)
		}
		if sel.Reset < 1 || sel.Reset > Window(sel.Unit) {
			add("rejected, and Envoy selects status %d (%q) with X-RateLimit-Reset %d, want 1 to %d", sel.Index, sel.Name, sel.Reset, Window(sel.Unit))
		}
	}
	for i, st := range resp.GetStatuses() {
		cl := st.GetCurrentLimit()
		reset := st.GetDurationUntilReset().GetSeconds()
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			switch {
			case cl == nil:
				add("status %d is OVER_LIMIT without a current_limit", i)
			case st.GetLimitRemaining() != 0:
				add("status %d (%q) is OVER_LIMIT with %d remaining", i, cl.GetName(), st.GetLimitRemaining())
			case reset < 1 || reset > Window(cl.GetUnit()):
				add("status %d (%q) is OVER_LIMIT with reset %d s, want 1 to %d", i, cl.GetName(), reset, Window(cl.GetUnit()))
			}
			continue
		}
		if cl == nil {
			continue
		}
		if st.GetLimitRemaining() == 0 && reset == 0 {
			add("status %d (%q) reports 0 remaining and X-RateLimit-Reset 0", i, cl.GetName())
		}
		if rejected && reset == 0 && st.GetLimitRemaining() < cl.GetRequestsPerUnit() {
			add("status %d (%q) of a rejected response reports reset 0 s with %d of %d remaining", i, cl.GetName(), st.GetLimitRemaining(), cl.GetRequestsPerUnit())
		}
	}
	return out
}
