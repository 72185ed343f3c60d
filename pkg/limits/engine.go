package limits

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// EngineOptions tunes an Engine. The zero value is ready to use.
type EngineOptions struct {
	// Limits bounds what a request may carry; its zero fields take
	// DefaultRequestLimits' values.
	Limits RequestLimits
	// FailureMode is what requests get while the store cannot decide, for
	// domains whose rule files set no failure_mode. Zero (FailDefault)
	// means FailLocal.
	FailureMode FailureMode
	// Local is the store FailLocal decides on, normally a memory store.
	// Without one, FailLocal fails the call as FailError does.
	Local Store
	// LocalDivisor is the number of replicas that share the limits: on
	// Local, each limit is divided by it. Zero means 1.
	LocalDivisor uint64
	// Observer, if set, is told about every decision.
	Observer Observer
	// OverrideKeys says whether a descriptor's own limit shares its
	// counter with the rules' (the zero value, as envoyproxy/ratelimit)
	// or has one of its own.
	OverrideKeys OverrideKeys
	// QuotaMode makes every descriptor of every request a quota_mode
	// descriptor, as envoyproxy/ratelimit's QUOTA_MODE does: unlimited
	// ones aside, those that match no limit too, which are never over,
	// so that a request with one is never rejected by its quota.
	QuotaMode bool
	// CalendarMonths counts Envoy's per-request limits of a month that
	// no OverrideSpec counts in UTC calendar months, as
	// envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT does (rule
	// files get theirs from config.Options.CalendarMonths).
	CalendarMonths bool
}

// Engine decides requests against the current Ruleset through a Store. It
// is safe for concurrent use.
type Engine struct {
	rules    atomic.Pointer[Ruleset]
	store    Store
	limits   RequestLimits
	failure  FailureMode
	local    Store
	divisor  uint64
	observer Observer
	override OverrideKeys
	quota    bool      // EngineOptions.QuotaMode
	months   *Calendar // UTC, with EngineOptions.CalendarMonths; else nil
	now      func() time.Time
}

// Observer is told about every decision, for metrics. Observe must be fast
// and safe for concurrent use, and must not keep req or d.
type Observer interface {
	Observe(req *Request, d *Decision, took time.Duration, err error)
}

// NewEngine returns an engine deciding rs through store.
func NewEngine(rs *Ruleset, store Store, o EngineOptions) *Engine {
	e := &Engine{
		store:    store,
		limits:   o.Limits.withDefaults(),
		failure:  o.FailureMode,
		local:    o.Local,
		divisor:  max(o.LocalDivisor, 1),
		observer: o.Observer,
		override: o.OverrideKeys,
		quota:    o.QuotaMode,
		months:   utcMonths(o.CalendarMonths),
		now:      time.Now,
	}
	if e.failure == FailDefault {
		e.failure = FailLocal
	}
	e.rules.Store(rs)
	return e
}

// FailureMode returns what requests of domain get while the store cannot
// decide: the domain's failure_mode, else the engine's.
func (e *Engine) FailureMode(domain string) FailureMode {
	return e.rules.Load().FailureMode(domain, e.failure)
}

// FailingDomains returns the domains of the rules in use whose requests
// fail while the store cannot decide (failure mode error), sorted. A
// readiness check uses it: those domains cannot be served without the
// store, while every other domain is answered by its failure mode.
func (e *Engine) FailingDomains() []string {
	rs := e.rules.Load()
	var out []string
	for _, d := range rs.Domains() {
		if rs.FailureMode(d, e.failure) == FailError {
			out = append(out, d)
		}
	}
	return out
}

// Rules returns the ruleset in use.
func (e *Engine) Rules() *Ruleset { return e.rules.Load() }

// SetRules swaps in a new ruleset for the requests that start after it.
func (e *Engine) SetRules(rs *Ruleset) { e.rules.Store(rs) }

// Decide decides req into d. It returns a *RequestError for a malformed
// request, or the store's error if the store could not decide; over limit
// is a verdict in d, not an error.
func (e *Engine) Decide(ctx context.Context, req *Request, d *Decision) error {
	if e.observer == nil {
		return e.decide(ctx, req, d)
	}
	start := e.now()
	err := e.decide(ctx, req, d)
	e.observer.Observe(req, d, e.now().Sub(start), err)
	return err
}

// Reject records req, which could not be read (err, a *RequestError, says
// why), as a decision that failed with err: the observer counts it as
// invalid. d is reset.
func (e *Engine) Reject(req *Request, d *Decision, err error) {
	d.reset(0)
	if e.observer != nil {
		e.observer.Observe(req, d, 0, err)
	}
}

// decide runs the phases of a decision in order: validate, match every
// descriptor, drop replaced limits, build the batch, apply it to the store
// (or the failure mode), report per descriptor.
func (e *Engine) decide(ctx context.Context, req *Request, d *Decision) error {
	if err := e.Validate(req); err != nil {
		d.reset(0)
		return err
	}
	d.reset(len(req.Descriptors))
	rs := e.rules.Load()
	d.Rules = rs
	if !rs.HasDomain(req.Domain) {
		return nil // unknown domain: OK, no limits (as the reference)
	}
	if err := d.match(rs, req, e.override, e.months); err != nil {
		return err
	}
	d.dropped = Dropped(d.candidates, d.dropped[:0])
	d.buildBatch(req, e.quota)
	if len(d.batch.Checks) == 0 {
		return nil
	}
	if err := e.store.Apply(ctx, &d.batch); err != nil {
		if errors.As(err, new(*RequestError)) {
			return err
		}
		mode := rs.FailureMode(req.Domain, e.failure)
		if e.local == nil && mode == FailLocal {
			mode = FailError
		}
		d.StoreErr, d.Fallback = err, mode
		done, err := e.fallback(ctx, d, mode, err)
		if done || err != nil {
			return err
		}
	}
	d.report()
	return nil
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

// fallback answers d by mode after the store failed with err. It reports
// done when d is final; otherwise the local store decided the batch and
// the outcomes are to be reported as the store's would be.
func (e *Engine) fallback(ctx context.Context, d *Decision, mode FailureMode, err error) (done bool, _ error) {
	switch mode {
	case FailOpen:
		for i := range d.Statuses {
			d.Statuses[i] = Status{Rule: d.Statuses[i].Rule}
		}
		return true, nil
	case FailClosed:
		// Closed refuses requests; a refund refuses nothing, and is lost.
		for j := range d.batch.Checks {
			if d.batch.Checks[j].Refund {
				continue
			}
			st := &d.Statuses[d.checkOwner[j]]
			if st.Limit == nil {
				st.Code, st.Limit, st.Reset, st.Over = OverLimit, d.batch.Checks[j].Limit, ClosedReset, true
				d.Code = OverLimit
			}
		}
		return true, nil
	case FailLocal:
		for j := range d.batch.Checks {
			d.batch.Checks[j].Limit = d.batch.Checks[j].Limit.divided(e.divisor)
		}
		if err := e.local.Apply(ctx, &d.batch); err != nil {
			return true, fmt.Errorf("local fallback: %w", err)
		}
		return false, nil
	}
	return true, err
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
