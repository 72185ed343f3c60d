package rlqs

import (
	"fmt"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// planKind is how a bucket is answered.
type planKind uint8

const (
	planAllow planKind = iota // no limit applies: ALLOW_ALL
	planDeny                  // the rule cannot be served and its domain does not fail open: DENY_ALL
	planGrant                 // quota granted from the limit's counter
)

// plan is what a bucket's entries matched under one ruleset.
type plan struct {
	kind planKind
	// rule is the rule's limit and limit the one grants are taken under:
	// the same, but for a token or leaky bucket, whose burst is less the
	// reserve (see bucketPlan).
	rule, limit *limits.Limit
	key         string        // the limit's store key, as the RLS path builds it
	ttl         time.Duration // of every grant on a bucket; 0 on a window
	why         string        // for planAllow and planDeny: why, for the log
	reason      string        // for planAllow and planDeny: the metrics' reason
}

// planner plans buckets by the options every sidecar of a fleet must
// share, so that each reserves the same on a token or leaky bucket.
type planner struct {
	margin, bucketTTL time.Duration
	// mode is each domain's failure mode, which decides how a bucket
	// that cannot be served is answered; nil: none fails open.
	mode func(domain string) limits.FailureMode
}

// planner is the planner of a server with options o, defaults applied.
func (o Options) planner(mode func(domain string) limits.FailureMode) planner {
	return planner{margin: o.Margin, bucketTTL: o.BucketTTL, mode: mode}
}

// match maps a bucket's entries, as a descriptor, to a plan under rs.
func (pl planner) match(rs *limits.Ruleset, domain string, ents []limits.Entry) plan {
	x := rs.Explain(domain, ents)
	var enforced []limits.KeyedLimit
	for _, kl := range x.Limits {
		if !kl.Limit.Shadow {
			enforced = append(enforced, kl)
		}
	}
	fail := func(why string) plan {
		if pl.mode != nil && pl.mode(domain) == limits.FailOpen {
			return plan{kind: planAllow, why: why, reason: "unsupported"}
		}
		return plan{kind: planDeny, why: why, reason: "unsupported"}
	}
	switch {
	case x.Result != limits.MatchLimited:
		return plan{kind: planAllow, why: x.Reason, reason: "no_rule"}
	case len(enforced) == 0:
		return plan{kind: planAllow, why: "only shadow limits apply", reason: "no_rule"}
	case len(enforced) > 1:
		return fail(fmt.Sprintf("%d limits apply; RLQS serves one limit per bucket", len(enforced)))
	}
	p, err := pl.planLimit(enforced[0].Limit)
	if err != nil {
		return fail(err.Error())
	}
	p.key = enforced[0].Key
	return p
}

// planLimit plans a bucket whose one enforced limit is l, or says why
// RLQS cannot serve it exactly.
func (pl planner) planLimit(l *limits.Limit) (plan, error) {
	switch {
	case l.Unlimited:
		return plan{kind: planAllow, why: "the rule is unlimited", reason: "no_rule"}, nil
	case l.Requests == 0:
		return plan{kind: planDeny, why: "the rule bans every request", reason: "dry"}, nil
	case l.Calendared():
		// Grants and pushes here follow epoch-aligned windows.
		return plan{}, fmt.Errorf("a calendar window cannot be served over RLQS yet")
	case l.Algorithm == limits.FixedWindow || l.Algorithm == limits.SlidingWindow:
		if l.Window() < 3*time.Second {
			return plan{}, fmt.Errorf("window %s is too short for Envoy's whole-second assignments", l.Window())
		}
		return plan{kind: planGrant, rule: l, limit: l}, nil
	case l.Algorithm.Bucketed():
		return pl.bucketPlan(l)
	}
	return plan{}, fmt.Errorf("algorithm %s cannot be served exactly over RLQS", l.Algorithm)
}

// bucketPlan plans grants on a token or leaky bucket l.
//
// Hits granted at t are counted in the store at t, but Envoy may spend
// them until t + Margin + ttl, and in between the bucket refills: spent
// late, they could come on top of hits the refill let others take. So
// grants are taken under l with its burst less a reserve: what l refills
// in ttl + Margin. Whatever the fleet spends in any span of time is then
// within the burst and the rate of l.
//
// ttl is the longest whole-second time to live, up to Options.BucketTTL,
// whose reserve is at most half the burst. It depends only on l and the
// options, so that every sidecar of a fleet (with the same options)
// reserves the same.
func (pl planner) bucketPlan(l *limits.Limit) (plan, error) {
	refill := func(d time.Duration) uint64 { // hits l refills in d, rounded up
		return ceilMulDiv(l.Requests, uint64(d), uint64(l.Window()))
	}
	for ttl := pl.bucketTTL.Truncate(time.Second); ttl >= time.Second; ttl -= time.Second {
		reserve := refill(ttl + pl.margin)
		if reserve <= l.Burst/2 && l.Burst-reserve >= 2 {
			return plan{kind: planGrant, rule: l, limit: l.WithBurst(l.Burst - reserve), ttl: ttl}, nil
		}
	}
	return plan{}, fmt.Errorf("burst %d is too small to serve over RLQS: it must be at least twice the %d hits %s refills in %s (a one-second assignment and its margin)",
		l.Burst, refill(time.Second+pl.margin), l.Algorithm, time.Second+pl.margin)
}

// Unserved lists the rules of rs that RLQS cannot serve from a limit,
// each as "file:line path: reason"; buckets that match them get their
// domain's failure mode. o is the server's options (BucketTTL and Margin
// decide which token and leaky buckets it serves).
func Unserved(rs *limits.Ruleset, o Options) []string {
	return o.withDefaults().planner(nil).unserved(rs)
}

func (pl planner) unserved(rs *limits.Ruleset) []string {
	var out []string
	for _, r := range rs.All() {
		var enforced []*limits.Limit
		for _, l := range r.Limits {
			if !l.Shadow && !l.Unlimited {
				enforced = append(enforced, l)
			}
		}
		var err error
		switch {
		case len(enforced) > 1:
			err = fmt.Errorf("%d limits apply; RLQS serves one limit per bucket", len(enforced))
		case len(enforced) == 1:
			_, err = pl.planLimit(enforced[0])
		}
		if err != nil {
			out = append(out, fmt.Sprintf("%s:%d %s: %v", r.File, r.Line, r.Path, err))
		}
	}
	return out
}

// Serves reports how the server answers a bucket of domain under rs:
// nil when it assigns quota granted from the bucket's limit, else an
// error saying why not (no rule applies, the rule cannot be served
// exactly, the bucket id is empty), for a server with options o.
// Configuration checks use it.
func Serves(rs *limits.Ruleset, o Options, domain string, bucket map[string]string) error {
	ents, err := entriesOf(&rlqspb.BucketId{Bucket: bucket})
	if err != nil {
		return err
	}
	if p := o.withDefaults().planner(nil).match(rs, domain, ents); p.kind != planGrant {
		return fmt.Errorf("not served from a limit (%s): %s", p.reason, p.why)
	}
	return nil
}
