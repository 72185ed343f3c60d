package limits

import (
	"fmt"
	"time"
)

// Code is a decision's verdict.
type Code uint8

// The verdicts.
const (
	OK Code = iota
	OverLimit
)

func (c Code) String() string {
	if c == OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// Status is the verdict on one descriptor, as Envoy reads it: Envoy
// writes its X-RateLimit headers from the first status with the least
// Remaining among those that report a limit, so a status reports a
// limit and a state only when they are what a client should follow.
type Status struct {
	Code Code
	// Limit is the limit reported to Envoy: of the enforced limits that
	// are over, the one that resets last (a retry before then fails
	// again); else the one with the least remaining. Nil when no limit
	// applies, when the store learned none of their states (Unknown), and
	// when the only limit over is a shadow limit on a rejected request,
	// where it would lead Envoy away from the limit that decided.
	Limit *Limit
	// Rule is the rule the descriptor matched, or nil.
	Rule *Rule
	// Remaining is what Limit still admits (see Outcome.Remaining); 0
	// when Code is OverLimit, as envoyproxy/ratelimit reports it, also
	// when the limit has some left but fewer than the request's hits:
	// otherwise Envoy would prefer another status with as little left.
	Remaining uint64
	// Reset is Limit's Outcome.Reset: when over, how long until the
	// request could be admitted.
	Reset time.Duration
	// Unlimited is set when the descriptor matched an unlimited rule.
	Unlimited bool
	// Unknown is set when limits apply to the descriptor but the store
	// learned none of their states (see Outcome.Unknown). Limit is then
	// nil, so that nothing is reported as their state.
	Unknown bool
	// Over is set when a limit of the descriptor, other than a shadow
	// limit, was over. Code says OverLimit then too, except for a quota
	// limit on a request that its quota groups did not reject, which
	// reports nothing (see Decision.report).
	Over bool
}

// Decision is the verdict on a whole request. Reuse one Decision for many
// requests (one per goroutine) to avoid allocating.
type Decision struct {
	Code     Code
	Statuses []Status
	// StoreErr is the store's error when it could not decide and Fallback
	// (the domain's failure mode) answered instead; nil otherwise.
	StoreErr error
	Fallback FailureMode
	// Rules is the ruleset the decision used.
	Rules *Ruleset

	// Scratch reused from request to request. Each slice means one thing
	// through every phase of Engine.decide.
	candidates []*Limit // every limit the descriptors matched, in order
	candOwner  []int    // candOwner[i]: the descriptor of candidates[i]
	dropped    []bool   // dropped[i]: another matched limit replaces candidates[i]
	batch      Batch    // the checks sent to the store
	checkOwner []int    // checkOwner[j]: the descriptor of batch.Checks[j]
	group      []int    // group[i]: descriptor i's quota group, 0 if none; see groups
	holds      []string // holds[i]: descriptor i's hold (Rule.HoldKey), if it names one
	held       []bool   // held[i]: descriptor i's last entry is its hold, not part of its counters
	key        []byte   // scratch for building keys
	ents       []Entry  // scratch for share_threshold entries
}

// match lists, in d.candidates, the limits every descriptor of req
// reaches: a descriptor's override limit, keyed as keys says, else the
// limits of the rule it matches.
func (d *Decision) match(rs *Ruleset, req *Request, keys OverrideKeys, months *Calendar) error {
	for i := range req.Descriptors {
		desc := &req.Descriptors[i]
		if o := desc.Override; o != nil {
			spec := rs.OverrideSpec(req.Domain, desc.Entries)
			l, err := overrideLimit(o, keys, spec, months)
			if err != nil {
				return &RequestError{fmt.Sprintf("descriptors[%d].limit", i), err.Error()}
			}
			d.candidates = append(d.candidates, l)
			d.candOwner = append(d.candOwner, i)
			continue
		}
		r, hold, held := rs.MatchHold(req.Domain, desc.Entries)
		if r == nil || len(r.Limits) == 0 {
			continue
		}
		if held {
			if err := checkHold(hold); err != nil {
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].value", i, len(desc.Entries)-1), err.Error()}
			}
			d.setHold(i, hold)
		}
		d.Statuses[i].Rule = r
		for _, l := range r.Limits {
			if l.Algorithm == Concurrency && !held {
				return &RequestError{fmt.Sprintf("descriptors[%d].entries", i),
					fmt.Sprintf("rule %s limits requests in flight: its last entry must be %s, naming the request", r.Name, r.HoldKey)}
			}
			d.candidates = append(d.candidates, l)
			d.candOwner = append(d.candOwner, i)
		}
	}
	return nil
}

// setHold records that descriptor i names hold in its last entry.
func (d *Decision) setHold(i int, hold string) {
	if n := len(d.Statuses); len(d.holds) < n {
		d.holds = append(d.holds[:0], make([]string, n)...)
		d.held = append(d.held[:0], make([]bool, n)...)
	}
	d.holds[i], d.held[i] = hold, true
}

// Dropped reports, in dst[i], whether a request whose descriptors matched
// the limits ls drops ls[i] because another of them replaces its name.
// As in envoyproxy/ratelimit, names are collected from every matched
// limit, unlimited ones included, before any is dropped, and an unlimited
// limit is never dropped. dst's array is reused.
func Dropped(ls []*Limit, dst []bool) []bool {
	dst = dst[:0]
	for _, l := range ls {
		dst = append(dst, !l.Unlimited && l.Name != "" && replaced(ls, l.Name))
	}
	return dst
}

func replaced(ls []*Limit, name string) bool {
	for _, l := range ls {
		for _, r := range l.Replaces {
			if r == name {
				return true
			}
		}
	}
	return false
}

// buildBatch turns the candidates that are not dropped into the batch's
// checks, and marks descriptors that reached an unlimited limit. quotaAll
// is EngineOptions.QuotaMode.
func (d *Decision) buildBatch(req *Request, quotaAll bool) {
	quota := quotaAll
	for i, l := range d.candidates {
		if d.dropped[i] {
			continue
		}
		if l.Unlimited {
			d.Statuses[d.candOwner[i]].Unlimited = true
		}
		quota = quota || l.Quota
	}
	if quota {
		d.groups(quotaAll)
	}
	for i, l := range d.candidates {
		if d.dropped[i] || l.Unlimited {
			continue
		}
		owner := d.candOwner[i]
		desc := &req.Descriptors[owner]
		hits := max(req.Hits, 1)
		if desc.HasHits {
			hits = desc.Hits
		}
		entries, hold := desc.Entries, ""
		if owner < len(d.held) && d.held[owner] {
			entries, hold = entries[:len(entries)-1], d.holds[owner]
		}
		d.key, _ = AppendKey(d.key[:0], req.Domain, counterEntries(d.Statuses[owner].Rule, entries, &d.ents), l)
		c := Check{Key: string(d.key), Limit: l, Hits: hits, Refund: desc.Negative, Hold: hold}
		if !c.Refund && l.Algorithm != Concurrency && !c.Reserves() {
			// A slot or a reservation is taken or not: never counted
			// past the limit.
			c.Usage = l.Charge.Usage(hits, desc.HasHits)
		}
		if quota {
			c.Group = d.group[owner]
		}
		d.batch.Checks = append(d.batch.Checks, c)
		d.checkOwner = append(d.checkOwner, owner)
	}
}

// groups numbers the quota descriptors in d.group, from 1, and sets the
// batch's QuotaGroups, as envoyproxy/ratelimit counts them: a descriptor
// is a quota descriptor if a limit of its that is not dropped has
// quota_mode, or, with quotaAll, unless it is unlimited. So under
// quotaAll a descriptor whose limits are all dropped, or that matched
// none, is a quota descriptor that is never over.
func (d *Decision) groups(quotaAll bool) {
	n := len(d.Statuses)
	if cap(d.group) < n {
		d.group = make([]int, n)
	}
	d.group = d.group[:n]
	clear(d.group)
	for i, l := range d.candidates {
		if !d.dropped[i] && l.Quota {
			d.group[d.candOwner[i]] = 1
		}
	}
	g := 0
	for i := range d.group {
		if d.Statuses[i].Unlimited || (d.group[i] == 0 && !quotaAll) {
			d.group[i] = 0
			continue
		}
		g++
		d.group[i] = g
	}
	d.batch.QuotaGroups = g
}

// report sets each descriptor's status from the outcomes, as Status
// documents. A shadow limit that is over reports OK with nothing left on
// an admitted request, as the reference; on a rejected one it reports
// nothing. A quota limit that is over reports OVER_LIMIT, as the
// reference, unless the request was rejected while its quota groups did
// not reject it: then it did not decide, and reports nothing, so that
// Envoy is led to a limit that did. An unknown outcome is never reported.
func (d *Decision) report() {
	admitted := d.batch.Admitted
	quotaDecided := !admitted && d.batch.QuotaOver(func(j int) bool { return d.batch.Outcomes[j].Over })
	for j := range d.batch.Checks {
		c, out := &d.batch.Checks[j], &d.batch.Outcomes[j]
		st := &d.Statuses[d.checkOwner[j]]
		if out.Over && !out.Unknown && !c.Limit.Shadow {
			st.Over = true
		}
		switch {
		case out.Unknown:
			st.Unknown = st.Limit == nil
		case out.Over && c.Limit.Shadow:
			if admitted && st.Code == OK {
				st.Limit, st.Remaining, st.Reset, st.Unknown = c.Limit, 0, out.Reset, false
			}
		case out.Over && c.Group > 0 && !admitted && !quotaDecided:
			// Did not decide: reports nothing.
		case out.Over:
			if st.Code == OK || out.Reset > st.Reset {
				st.Code, st.Limit, st.Remaining, st.Reset, st.Unknown = OverLimit, c.Limit, 0, out.Reset, false
			}
		case st.Code == OK && (st.Limit == nil || out.Remaining < st.Remaining):
			st.Limit, st.Remaining, st.Reset, st.Unknown = c.Limit, out.Remaining, out.Reset, false
		}
	}
	if !admitted {
		d.Code = OverLimit
	}
}

// Checks returns the limit checks the decision made, in order; Outcomes
// and Admitted give their results and Descriptor the index of the request
// descriptor each check belongs to. The slices are reused by the next
// decision.
func (d *Decision) Checks() []Check { return d.batch.Checks }

// Outcomes returns the outcome of each of Checks.
func (d *Decision) Outcomes() []Outcome { return d.batch.Outcomes }

// Admitted reports whether the checks consumed their hits.
func (d *Decision) Admitted() bool { return d.batch.Admitted }

// Descriptor returns the request descriptor that check j belongs to.
func (d *Decision) Descriptor(j int) int { return d.checkOwner[j] }

// DecidedBy returns the store layer that answered the checks (see
// Batch.DecidedBy): empty when the backend store did, or when a failure
// mode answered instead (see Fallback).
func (d *Decision) DecidedBy() string { return d.batch.DecidedBy }

// reset readies d for a request of n descriptors, keeping its arrays.
func (d *Decision) reset(n int) {
	d.Code = OK
	d.StoreErr, d.Fallback, d.Rules = nil, FailDefault, nil
	clear(d.Statuses)
	if cap(d.Statuses) < n {
		d.Statuses = make([]Status, n)
	}
	d.Statuses = d.Statuses[:n]
	clear(d.candidates)
	d.candidates = d.candidates[:0]
	d.candOwner = d.candOwner[:0]
	d.dropped = d.dropped[:0]
	d.checkOwner = d.checkOwner[:0]
	clear(d.holds)
	clear(d.held)
	d.batch.Reset()
}
