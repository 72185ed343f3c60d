package limits

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Request is one rate-limit request, as Envoy sends it.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// Hits is the request's hits_addend; 0 means 1.
	Hits uint64
}

// Descriptor is one request descriptor.
type Descriptor struct {
	Entries []Entry
	// Override, when set, replaces the rule tree with a fixed-window limit
	// of its own (Envoy's descriptor.limit).
	Override *Override
	// Hits, when HasHits is set, is the descriptor's own hits_addend. It
	// wins over Request.Hits and may be 0, which checks without consuming.
	Hits    uint64
	HasHits bool
}

// Override is a per-request limit sent by Envoy.
type Override struct {
	Requests uint64
	Unit     Unit
}

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

// Status is the verdict on one descriptor.
type Status struct {
	Code Code
	// Limit is the limit reported to Envoy: the one that was over, else the
	// one with the least remaining. Nil when no limit applies.
	Limit *Limit
	// Rule is the rule the descriptor matched, or nil.
	Rule      *Rule
	Remaining uint64
	Reset     time.Duration
	// Unlimited is set when the descriptor matched an unlimited rule.
	Unlimited bool
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

	batch Batch
	owner []int  // owner[i] is the descriptor of batch.Checks[i]
	key   []byte // scratch for building keys
	ents  []Entry
	limit []*Limit // candidate limits, parallel to owner, before replaces
	drop  []bool   // parallel to limit: replaced by another limit
}

// RequestError is a malformed request. Field names the offending field in
// Envoy's proto terms, e.g. descriptors[1].entries[0].key.
type RequestError struct {
	Field string
	Msg   string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Msg }

// RequestLimits bounds what a request may carry. The defaults are far
// above anything Envoy sends and only stop abuse.
type RequestLimits struct {
	MaxDescriptors int    // per request
	MaxEntries     int    // per descriptor
	MaxValueBytes  int    // per key or value
	MaxHits        uint64 // per hits_addend
}

// DefaultRequestLimits are the limits NewEngine uses.
var DefaultRequestLimits = RequestLimits{
	MaxDescriptors: 64,
	MaxEntries:     32,
	MaxValueBytes:  4096,
	MaxHits:        1_000_000,
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
	now      func() time.Time
}

// Observer is told about every decision, for metrics. Observe must be fast
// and safe for concurrent use, and must not keep req or d.
type Observer interface {
	Observe(req *Request, d *Decision, took time.Duration, err error)
}

// WithObserver sets the engine's observer.
func WithObserver(o Observer) EngineOption {
	return func(e *Engine) { e.observer = o }
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// WithFailureMode sets what requests get while the store cannot decide,
// for domains whose rule file does not say (failure_mode). The default is
// FailLocal.
func WithFailureMode(m FailureMode) EngineOption {
	return func(e *Engine) { e.failure = m }
}

// WithLocalFallback sets the store FailLocal decides on, and the number of
// replicas that share the limits (each limit is divided by it there). The
// default is a new MemoryStore and 1.
func WithLocalFallback(s Store, divisor uint64) EngineOption {
	return func(e *Engine) { e.local, e.divisor = s, max(divisor, 1) }
}

// NewEngine returns an engine deciding rs through store.
func NewEngine(rs *Ruleset, store Store, lim RequestLimits, opts ...EngineOption) *Engine {
	e := &Engine{store: store, limits: lim, failure: FailLocal, divisor: 1, now: time.Now}
	for _, o := range opts {
		o(e)
	}
	if e.local == nil {
		e.local = NewMemoryStore()
	}
	e.rules.Store(rs)
	return e
}

// Rules returns the ruleset in use.
func (e *Engine) Rules() *Ruleset { return e.rules.Load() }

// SetRules swaps in a new ruleset for the requests that start after it.
func (e *Engine) SetRules(rs *Ruleset) { e.rules.Store(rs) }

// Validate checks req against the engine's request limits.
func (e *Engine) Validate(req *Request) error {
	lim := &e.limits
	switch {
	case req.Domain == "":
		return &RequestError{"domain", "must not be empty"}
	case len(req.Domain) > lim.MaxValueBytes:
		return &RequestError{"domain", fmt.Sprintf("longer than %d bytes", lim.MaxValueBytes)}
	case len(req.Descriptors) == 0:
		return &RequestError{"descriptors", "must not be empty"}
	case len(req.Descriptors) > lim.MaxDescriptors:
		return &RequestError{"descriptors", fmt.Sprintf("%d descriptors, more than the maximum %d", len(req.Descriptors), lim.MaxDescriptors)}
	case req.Hits > lim.MaxHits:
		return &RequestError{"hits_addend", fmt.Sprintf("%d is more than the maximum %d", req.Hits, lim.MaxHits)}
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) == 0 {
			return &RequestError{fmt.Sprintf("descriptors[%d].entries", i), "must not be empty"}
		}
		if len(d.Entries) > lim.MaxEntries {
			return &RequestError{fmt.Sprintf("descriptors[%d].entries", i), fmt.Sprintf("%d entries, more than the maximum %d", len(d.Entries), lim.MaxEntries)}
		}
		for j, en := range d.Entries {
			switch {
			case en.Key == "":
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "must not be empty"}
			case len(en.Key) > lim.MaxValueBytes:
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), fmt.Sprintf("longer than %d bytes", lim.MaxValueBytes)}
			case len(en.Value) > lim.MaxValueBytes:
				return &RequestError{fmt.Sprintf("descriptors[%d].entries[%d].value", i, j), fmt.Sprintf("longer than %d bytes", lim.MaxValueBytes)}
			}
		}
		if d.HasHits && d.Hits > lim.MaxHits {
			return &RequestError{fmt.Sprintf("descriptors[%d].hits_addend", i), fmt.Sprintf("%d is more than the maximum %d", d.Hits, lim.MaxHits)}
		}
		if o := d.Override; o != nil && o.Unit.Duration() == 0 {
			return &RequestError{fmt.Sprintf("descriptors[%d].limit.unit", i), fmt.Sprintf("unknown unit %d", o.Unit)}
		}
	}
	return nil
}

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

	// Match every descriptor and list the candidate limits.
	for i := range req.Descriptors {
		desc := &req.Descriptors[i]
		st := &d.Statuses[i]
		if o := desc.Override; o != nil {
			l, err := NewLimit(FixedWindow, o.Requests, o.Unit, 1, 0)
			if err != nil {
				return &RequestError{fmt.Sprintf("descriptors[%d].limit", i), err.Error()}
			}
			d.owner = append(d.owner, i)
			d.limit = append(d.limit, l)
			continue
		}
		r := rs.Match(req.Domain, desc.Entries)
		if r == nil || len(r.Limits) == 0 {
			continue
		}
		st.Rule = r
		for _, l := range r.Limits {
			d.owner = append(d.owner, i)
			d.limit = append(d.limit, l)
		}
	}

	// A matched limit's replaces drop the counted limits of that name, as
	// in the reference: names are collected from every matched limit,
	// unlimited ones included, before any is dropped, and an unlimited
	// limit is never dropped (the reference sets it aside first).
	d.drop = d.drop[:0]
	for _, l := range d.limit {
		d.drop = append(d.drop, !l.Unlimited && l.Name != "" && replaced(d.limit, l.Name))
	}
	for j, drop := range d.drop {
		if drop {
			d.limit[j] = nil
		}
	}

	// Build the batch.
	for j, l := range d.limit {
		if l == nil {
			continue
		}
		i := d.owner[j]
		if l.Unlimited {
			d.Statuses[i].Unlimited = true
			continue
		}
		desc := &req.Descriptors[i]
		hits := max(req.Hits, 1)
		if desc.HasHits {
			hits = desc.Hits
		}
		var slot int
		d.key, slot = AppendKey(d.key[:0], req.Domain, counterEntries(d.Statuses[i].Rule, desc.Entries, &d.ents), l)
		d.batch.Checks = append(d.batch.Checks, Check{Key: string(d.key), Slot: slot, Limit: l, Hits: hits})
		d.owner[len(d.batch.Checks)-1] = i
	}
	if len(d.batch.Checks) == 0 {
		return nil
	}
	if err := e.store.Apply(ctx, &d.batch); err != nil {
		if errors.As(err, new(*RequestError)) {
			return err
		}
		mode := rs.failureMode(req.Domain, e.failure)
		d.StoreErr, d.Fallback = err, mode
		switch mode {
		case FailOpen:
			for i := range d.Statuses {
				d.Statuses[i] = Status{Rule: d.Statuses[i].Rule}
			}
			return nil
		case FailClosed:
			for j := range d.batch.Checks {
				st := &d.Statuses[d.owner[j]]
				if st.Limit == nil {
					st.Code, st.Limit = OverLimit, d.batch.Checks[j].Limit
				}
			}
			d.Code = OverLimit
			return nil
		case FailLocal:
			for j := range d.batch.Checks {
				d.batch.Checks[j].Limit = d.batch.Checks[j].Limit.divided(e.divisor)
			}
			if err := e.local.Apply(ctx, &d.batch); err != nil {
				return fmt.Errorf("local fallback: %w", err)
			}
		default:
			return err
		}
	}

	// Report, per descriptor, the limit that is over, else the one with
	// the least remaining.
	for j := range d.batch.Checks {
		c, out := &d.batch.Checks[j], &d.batch.Outcomes[j]
		st := &d.Statuses[d.owner[j]]
		enforcedOver := out.Over && !c.Limit.Shadow
		switch {
		case st.Limit == nil,
			enforcedOver && st.Code == OK,
			st.Code == OK && out.Remaining < st.Remaining:
			st.Limit, st.Remaining, st.Reset = c.Limit, out.Remaining, out.Reset
		}
		if enforcedOver {
			st.Code = OverLimit
		}
		if out.Over && c.Limit.Shadow && st.Code == OK {
			// Shadow limits report OK with nothing left, as the reference.
			st.Limit, st.Remaining, st.Reset = c.Limit, 0, out.Reset
		}
	}
	if !d.batch.Admitted {
		d.Code = OverLimit
	}
	return nil
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
func (d *Decision) Descriptor(j int) int { return d.owner[j] }

func (d *Decision) reset(n int) {
	d.Code = OK
	d.StoreErr, d.Fallback, d.Rules = nil, FailDefault, nil
	clear(d.Statuses)
	if cap(d.Statuses) < n {
		d.Statuses = make([]Status, n)
	}
	d.Statuses = d.Statuses[:n]
	d.owner = d.owner[:0]
	clear(d.limit)
	d.limit = d.limit[:0]
	d.batch.Reset()
}
