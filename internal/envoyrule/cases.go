package envoyrule

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Domain is the domain of Rules.
const Domain = "statuses"

// Rules are the rules every case runs on. Each descriptor key has one
// rule, which matches any value. b's limit is leased, so that a path
// with leases answers it locally; paths without leases ignore that.
const Rules = `
domain: statuses
descriptors:
  - key: a
    charge: admission  # a's own hits_addend is all-or-nothing here (see over_by_hits)
    rate_limit: {unit: minute, requests_per_unit: 2, name: a}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10, name: b, lease: 4}
  - key: two
    rate_limits:
      - {unit: hour, requests_per_unit: 100, name: two_hour, lease: 10}
      - {unit: minute, requests_per_unit: 2, name: two_minute}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: shadow}
  - key: free
    rate_limit: {unlimited: true}
  - key: tb
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 1, name: tb}
  - key: qa
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: qa}
  - key: qb
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10, name: qb}
`

// Values are the descriptor values the cases send for each key. A
// Cluster path checks that the keys of a request's descriptors lie on
// different masters, so that the request reserves per slot.
var Values = map[string]string{"a": "x", "b": "x", "two": "x", "shadow": "x", "free": "x", "tb": "x", "qa": "x", "qb": "z"}

// Desc is one descriptor of a step: [Key=Values[Key]], with its own
// hits_addend when Hits is set.
type Desc struct {
	Key  string
	Hits *uint64
}

// Want is what Envoy must select from a step's response on a path that
// decides (Decided): the limit of Name, with Remaining and Reset (whole
// seconds) as it reads them. Name "" means no status with a limit.
type Want struct {
	Code      rlsv3.RateLimitResponse_Code
	Name      string
	Remaining uint32
	Reset     int64
}

// Step is one request, sent at the case's fixed time, and what it must
// select.
type Step struct {
	Descs []Desc
	Want  Want
}

// Case is a named sequence of requests on fresh counters.
type Case struct {
	Name  string
	Steps []Step
}

// At is how far past storetest.Epoch (a boundary of every window) the
// clock stands in every case: a minute window resets in 50 s, an hour
// window in 3590 s.
const At = 10 // seconds

func d(key string) Desc { return Desc{Key: key} }

func hits(key string, n uint64) Desc { return Desc{Key: key, Hits: &n} }

func ok(name string, rem uint32, reset int64) Want {
	return Want{Code: rlsv3.RateLimitResponse_OK, Name: name, Remaining: rem, Reset: reset}
}

func over(name string, reset int64) Want {
	return Want{Code: rlsv3.RateLimitResponse_OVER_LIMIT, Name: name, Reset: reset}
}

func step(w Want, ds ...Desc) Step { return Step{Descs: ds, Want: w} }

// Cases returns the table. Every expectation follows from Envoy's rule
// and the limits' semantics: a rejected request leads Envoy to the limit
// that is over, with 0 remaining and the whole seconds until it could
// pass, rounded up; an admitted one to the limit with the least left.
func Cases() []Case {
	// a (2 per minute) exhausted by two requests, as several cases begin.
	exhaustA := []Step{step(ok("a", 1, 50), d("a")), step(ok("a", 0, 50), d("a"))}
	return []Case{
		{Name: "over_second", Steps: append(exhaustA,
			step(over("a", 50), d("b"), d("a")))},
		{Name: "over_first", Steps: append(exhaustA,
			step(over("a", 50), d("a"), d("b")))},
		{Name: "admitted_least_remaining", Steps: []Step{
			step(ok("a", 1, 50), d("a")),
			step(ok("a", 0, 50), d("b"), d("a")),
		}},
		// A descriptor with two limits reports the one that is over.
		{Name: "two_limits", Steps: []Step{
			step(ok("two_minute", 1, 50), d("two")),
			step(ok("two_minute", 0, 50), d("two")),
			step(over("two_minute", 50), d("b"), d("two")),
		}},
		// hits_addend 2 with 1 left: over, and reported with 0 left, not
		// the 1 that is left before the hits, which ties with b's 1.
		{Name: "over_by_hits", Steps: []Step{
			step(ok("b", 1, 3590), hits("b", 9)),
			step(ok("a", 1, 50), d("a")),
			step(over("a", 50), d("b"), hits("a", 2)),
		}},
		// A shadow limit that is over never decides: it must not hide the
		// limit that did.
		{Name: "shadow_and_over", Steps: append([]Step{
			step(ok("shadow", 0, 50), d("shadow"))}, append(exhaustA,
			step(over("a", 50), d("shadow"), d("a")))...)},
		// Admitted with a shadow limit over: it previews "0 left", as the
		// reference reports it.
		{Name: "shadow_admitted", Steps: []Step{
			step(ok("shadow", 0, 50), d("shadow")),
			step(ok("shadow", 0, 50), d("shadow"), d("b")),
		}},
		// An unlimited descriptor reports no limit (and the most remaining).
		{Name: "unlimited", Steps: append(exhaustA,
			step(over("a", 50), d("free"), d("a")))},
		{Name: "unlimited_admitted", Steps: []Step{
			step(ok("b", 9, 3590), d("free"), d("b")),
		}},
		// hits_addend 0 consumes nothing; on an exhausted limit it is over.
		{Name: "hits_zero", Steps: append(exhaustA,
			step(ok("b", 10, 3590), hits("b", 0)),
			step(over("a", 50), hits("b", 0), hits("a", 0)))},
		// A token takes 100 ms: a reset below a second must not read 0.
		{Name: "subsecond_reset", Steps: []Step{
			step(ok("tb", 0, 1), d("tb")),
			step(over("tb", 1), d("b"), d("tb")),
		}},
		// quota_mode: qa is over, qb has room: admitted, and qa reports
		// OVER_LIMIT with nothing left, as the reference reports it.
		{Name: "quota_one_over", Steps: []Step{
			step(ok("qa", 0, 50), d("qa")),
			step(ok("qa", 0, 50), d("qa"), d("qb")),
			step(ok("qb", 8, 3590), d("qb")),
			// A deny cache that saw qa over must still let qb decide.
			step(ok("qa", 0, 50), d("qa"), d("qb")),
		}},
		// Every quota descriptor over: rejected, leading Envoy to the
		// first of them.
		{Name: "quota_all_over", Steps: []Step{
			step(ok("qa", 0, 50), d("qa")),
			step(ok("qb", 0, 3590), hits("qb", 10)),
			step(over("qa", 50), d("qa"), d("qb")),
			step(over("qb", 3590), d("qb"), d("qa")),
		}},
		// a rejects while qb has room: qa, over, did not decide and must
		// not lead Envoy away from a, though it comes first.
		{Name: "quota_over_not_deciding", Steps: append(exhaustA,
			step(ok("qa", 0, 50), d("qa")),
			step(over("a", 50), d("qa"), d("qb"), d("a")))},
	}
}
