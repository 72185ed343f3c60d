package limits

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

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

// Validate checks req against the engine's request limits.
func (e *Engine) Validate(req *Request) error { return e.limits.check(req) }

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
