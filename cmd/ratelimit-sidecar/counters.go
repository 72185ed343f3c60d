package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// counterStore is a backend whose counters the admin endpoints read and
// reset: memory.Store and redis.Lazy.
type counterStore interface {
	Inspect(ctx context.Context, key string, l *limits.Limit) (limits.State, time.Time, error)
	Reset(ctx context.Context, key string, l *limits.Limit) (bool, error)
}

// storeKeyer is a backend whose keys are not the counters' own: Redis
// prefixes them.
type storeKeyer interface {
	StoreKey(key string) string
}

// counters serves GET /debug/counters and POST /debug/counters/reset on
// the admin address: for each descriptor of a request, the counters of
// the limits the rules give it, as the backend holds them, and what this
// sidecar's deny cache and leases hold for them.
type counters struct {
	engine *limits.Engine
	store  counterStore // the backend, past the middleware; nil if it cannot show counters
	name   string       // the backend's name
	deny   *store.DenyCache
	leases *store.Leases
	// allowReset is --admin-counter-reset.
	allowReset bool
	log        *zap.Logger
	values     rejectlog.Values // how the reset's log line shows descriptor values
	// resetDone counts n counters reset.
	resetDone func(n int)
}

// newCounters returns the endpoints for the sidecar's store st.
func newCounters(e *limits.Engine, st *sidecarStore, c *settings, log *zap.Logger, m *metrics.Metrics) *counters {
	values, _ := rejectlog.ParseValues(c.rejections.values) // checked with the flags
	return &counters{
		engine: e, store: st.counters, name: st.name, deny: st.deny, leases: st.leases,
		allowReset: c.counterReset, log: log, values: values, resetDone: m.CounterResets(),
	}
}

// counterTimeout bounds one request's store calls, whatever the client's
// patience.
const counterTimeout = 5 * time.Second

// maxCounterBody bounds a reset's form body.
const maxCounterBody = 64 << 10

// countersView is GET /debug/counters's JSON.
type countersView struct {
	Domain      string                  `json:"domain"`
	Store       string                  `json:"store"`
	Descriptors []counterDescriptorView `json:"descriptors"`
}

type counterDescriptorView struct {
	Descriptor string `json:"descriptor"`
	// Result and Reason are limits.Explain's: how the rules matched.
	Result   string        `json:"result"`
	Reason   string        `json:"reason"`
	Rule     string        `json:"rule,omitempty"`
	Source   string        `json:"source,omitempty"`
	Counters []counterView `json:"counters,omitempty"`
}

// counterView is one limit's counter. Remaining, Reset and Over are what
// a zero-hit check would answer now, from the state read: Over means the
// next hit is rejected.
type counterView struct {
	Limit     string     `json:"limit"`
	Key       string     `json:"key,omitempty"`
	KeyHash   string     `json:"key_sha256,omitempty"`
	Now       *time.Time `json:"now,omitempty"`
	State     *stateView `json:"state,omitempty"`
	Remaining *uint64    `json:"remaining,omitempty"`
	Reset     string     `json:"reset,omitempty"`
	Over      *bool      `json:"over,omitempty"`
	DenyCache *denyView  `json:"deny_cache,omitempty"`
	Lease     *leaseView `json:"lease,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// stateView is a counter's stored state, decoded for its algorithm. A
// nil field does not apply to the algorithm.
type stateView struct {
	// Fresh: nothing is stored; the counter starts from zero.
	Fresh bool `json:"fresh,omitempty"`
	// Fixed and sliding window.
	WindowStart  *time.Time `json:"window_start,omitempty"`
	Hits         *uint64    `json:"hits,omitempty"`
	PreviousHits *uint64    `json:"previous_window_hits,omitempty"`
	// Sliding log: the hits still in the window, oldest first.
	Entries []logEntryView `json:"entries,omitempty"`
	// Buckets: the last update, and the level then: free tokens (token
	// bucket) or the backlog of hits (leaky bucket, GCRA).
	LastUpdate *time.Time `json:"last_update,omitempty"`
	Tokens     *float64   `json:"tokens,omitempty"`
	Backlog    *float64   `json:"backlog,omitempty"`
	// FullAt is when a token bucket is full again; TAT is a leaky
	// bucket's theoretical arrival time, when its backlog has drained.
	FullAt *time.Time `json:"full_at,omitempty"`
	TAT    *time.Time `json:"tat,omitempty"`
	// Expires is when a window's or a log's state equals a fresh
	// counter's; a bucket's is FullAt or TAT.
	Expires *time.Time `json:"expires,omitempty"`
	// Debt is how far usage charges took the counter past its limit, in
	// hits (tokens below empty, for a bucket): until it is repaid, every
	// request is over. Absent when there is none.
	Debt *float64 `json:"debt,omitempty"`
}

type logEntryView struct {
	At   time.Time `json:"at"`
	Hits uint64    `json:"hits"`
}

// denyView is this sidecar's deny cache entry for a counter: requests of
// Probe or more hits are rejected without the store until Until.
type denyView struct {
	Probe uint64    `json:"probe"`
	Until time.Time `json:"until"`
}

// leaseView is this sidecar's lease of a counter: Held hits to admit
// without the store until Until.
type leaseView struct {
	Held  uint64    `json:"held"`
	Until time.Time `json:"until"`
}

// resetView is POST /debug/counters/reset's JSON.
type resetView struct {
	Domain      string                `json:"domain"`
	Store       string                `json:"store"`
	Descriptors []resetDescriptorView `json:"descriptors"`
}

type resetDescriptorView struct {
	Descriptor string             `json:"descriptor"`
	Result     string             `json:"result"`
	Counters   []resetCounterView `json:"counters,omitempty"`
}

type resetCounterView struct {
	Limit string `json:"limit"`
	Key   string `json:"key"`
	// Deleted: the store held state for the key, and no longer does.
	Deleted bool `json:"deleted"`
	// DenyCacheDropped: this sidecar's deny cache held an entry for it.
	DenyCacheDropped bool `json:"deny_cache_dropped,omitempty"`
	// LeaseDropped is the hits this sidecar's lease held, dropped.
	LeaseDropped *uint64 `json:"lease_dropped,omitempty"`
	Error        string  `json:"error,omitempty"`
}

// counterQuery is a request to the endpoints: a domain and descriptors.
type counterQuery struct {
	domain string
	descs  []descriptor
}

// parseQuery reads the domain and descriptor parameters, of the URL or,
// for a POST, of a form body, as `explain` takes them.
func (cs *counters) parseQuery(w http.ResponseWriter, r *http.Request) (counterQuery, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxCounterBody)
	if err := r.ParseForm(); err != nil {
		return counterQuery{}, fmt.Errorf("read the parameters: %w", err)
	}
	q := counterQuery{domain: r.Form.Get("domain")}
	switch {
	case len(r.Form["domain"]) > 1:
		return q, errors.New("domain: give one domain")
	case q.domain == "":
		return q, errors.New("domain: required, e.g. domain=edge")
	case len(r.Form["descriptor"]) == 0:
		return q, errors.New("descriptor: required, e.g. descriptor=tenant=acme,user=42 (repeat it for more descriptors)")
	}
	req := limits.Request{Domain: q.domain}
	for i, text := range r.Form["descriptor"] {
		ents, err := limits.ParseEntries(text)
		if err != nil {
			return q, fmt.Errorf("descriptor %d: %w", i+1, err)
		}
		q.descs = append(q.descs, descriptor{text: text, entries: ents})
		req.Descriptors = append(req.Descriptors, limits.Descriptor{Entries: ents})
	}
	if err := cs.engine.Validate(&req); err != nil {
		return q, err
	}
	return q, nil
}

// storeKey is the key under which the backend holds key.
func (cs *counters) storeKey(key string) string {
	if k, ok := cs.store.(storeKeyer); ok {
		return k.StoreKey(key)
	}
	return key
}

// begin starts a counters request: the store must be able to verb its
// counters, and the query must parse. When it cannot go on, begin has
// answered and reports false; else the caller must call cancel.
func (cs *counters) begin(w http.ResponseWriter, r *http.Request, verb string) (counterQuery, context.Context, context.CancelFunc, bool) {
	if cs.store == nil {
		http.Error(w, "the "+cs.name+" store cannot "+verb+" its counters", http.StatusNotImplemented)
		return counterQuery{}, nil, nil, false
	}
	q, err := cs.parseQuery(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return counterQuery{}, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), counterTimeout)
	return q, ctx, cancel, true
}

// read serves GET /debug/counters.
func (cs *counters) read(w http.ResponseWriter, r *http.Request) {
	q, ctx, cancel, ok := cs.begin(w, r, "show")
	if !ok {
		return
	}
	defer cancel()
	rs := cs.engine.Rules()
	v := countersView{Domain: q.domain, Store: cs.name, Descriptors: []counterDescriptorView{}}
	for _, d := range q.descs {
		x := rs.Explain(q.domain, d.entries)
		dv := counterDescriptorView{Descriptor: d.text, Result: x.Result.String(), Reason: x.Reason}
		if x.Rule != nil {
			dv.Rule, dv.Source = x.Rule.Name, x.Rule.File+":"+strconv.Itoa(x.Rule.Line)+": "+x.Rule.Path
		}
		for _, k := range x.Limits {
			dv.Counters = append(dv.Counters, cs.counter(ctx, k))
		}
		v.Descriptors = append(v.Descriptors, dv)
	}
	writeJSON(w, http.StatusOK, v)
}

// counter reads one limit's counter.
func (cs *counters) counter(ctx context.Context, k limits.KeyedLimit) counterView {
	l := k.Limit
	cv := counterView{Limit: l.String()}
	if k.Key == "" {
		return cv // unlimited: no counter
	}
	cv.Key, cv.KeyHash = cs.storeKey(k.Key), rejectlog.Hash(k.Key)
	st, now, err := cs.store.Inspect(ctx, k.Key, l)
	if err != nil {
		cv.Error = err.Error()
	} else {
		out, _ := l.Evaluate(st, now.UnixMicro(), 0)
		now = now.UTC()
		cv.Now, cv.State = &now, viewState(l, st, now)
		cv.Remaining, cv.Reset, cv.Over = &out.Remaining, out.Reset.String(), &out.Over
	}
	if cs.deny != nil {
		if e, ok := cs.deny.Entry(k.Key); ok && e.Limit.CountsLike(l) {
			cv.DenyCache = &denyView{Probe: e.Probe, Until: e.Until.UTC()}
		}
	}
	if cs.leases != nil {
		if ls, ok := cs.leases.Lease(k.Key); ok && ls.Limit.CountsLike(l) {
			cv.Lease = &leaseView{Held: ls.Held, Until: ls.Until.UTC()}
		}
	}
	return cv
}

// viewState decodes st, a counter's state under l, as of now.
func viewState(l *limits.Limit, st limits.State, now time.Time) *stateView {
	if st.Start == 0 && st.Count == 0 && st.Prev == 0 && len(st.Log) == 0 && st.Expire == 0 {
		return &stateView{Fresh: true}
	}
	at := func(us int64) *time.Time {
		t := time.UnixMicro(us).UTC()
		return &t
	}
	v := &stateView{}
	wticks := float64(l.Window().Microseconds() / l.Tick())
	switch l.Algorithm {
	case limits.FixedWindow:
		v.WindowStart, v.Hits, v.Expires = at(st.Start), &st.Count, at(st.Expire)
		v.Debt = debtOf(st.Count, l.Requests)
	case limits.SlidingWindow:
		v.WindowStart, v.Hits, v.PreviousHits, v.Expires = at(st.Start), &st.Count, &st.Prev, at(st.Expire)
		v.Debt = debtOf(st.Count, l.Requests)
	case limits.SlidingLog:
		v.Expires = at(st.Expire)
		var hits uint64
		since := now.UnixMicro() - l.Window().Microseconds()
		for _, e := range st.Log {
			if e.At > since {
				v.Entries = append(v.Entries, logEntryView{At: time.UnixMicro(e.At).UTC(), Hits: e.Hits})
				hits += e.Hits
			}
		}
		v.Hits = &hits
		v.Debt = debtOf(hits, l.Requests)
	case limits.TokenBucket:
		tokens := (float64(st.Count) - float64(st.Debt)) / wticks
		v.LastUpdate, v.Tokens, v.FullAt = at(st.Start*l.Tick()), &tokens, at(st.Expire)
	case limits.LeakyBucket:
		backlog := (float64(st.Count) + float64(st.Debt)) / wticks
		v.LastUpdate, v.Backlog, v.TAT = at(st.Start*l.Tick()), &backlog, at(st.Expire)
	}
	if l.Algorithm.Bucketed() && st.Debt > 0 {
		debt := float64(st.Debt) / wticks
		v.Debt = &debt
	}
	return v
}

// debtOf returns how far hits are past requests, or nil if they are not.
func debtOf(hits, requests uint64) *float64 {
	if hits <= requests {
		return nil
	}
	d := float64(hits - requests)
	return &d
}

// reset serves POST /debug/counters/reset: it deletes the counters of
// the descriptors' limits in the backend, and drops what this sidecar's
// deny cache and leases hold for them.
func (cs *counters) reset(w http.ResponseWriter, r *http.Request) {
	if !cs.allowReset {
		http.Error(w, "counter reset is off: start the sidecar with --admin-counter-reset to allow it", http.StatusForbidden)
		return
	}
	q, ctx, cancel, ok := cs.begin(w, r, "reset")
	if !ok {
		return
	}
	defer cancel()
	rs := cs.engine.Rules()
	v := resetView{Domain: q.domain, Store: cs.name, Descriptors: []resetDescriptorView{}}
	var keys []string
	deleted, failed := 0, 0
	for _, d := range q.descs {
		x := rs.Explain(q.domain, d.entries)
		dv := resetDescriptorView{Descriptor: d.text, Result: x.Result.String()}
		for _, k := range x.Limits {
			if k.Key == "" {
				continue
			}
			rv := resetCounterView{Limit: k.Limit.String(), Key: cs.storeKey(k.Key)}
			gone, err := cs.store.Reset(ctx, k.Key, k.Limit)
			rv.Deleted = gone
			if err != nil {
				// The store still holds the counter: what this sidecar
				// remembers of it stays true.
				rv.Error = err.Error()
				failed++
			} else {
				keys = append(keys, k.Key)
				if rv.Deleted {
					deleted++
				}
				if cs.deny != nil {
					rv.DenyCacheDropped = cs.deny.Forget(k.Key)
				}
				if cs.leases != nil {
					if held, ok := cs.leases.Drop(k.Key); ok {
						rv.LeaseDropped = &held
					}
				}
			}
			dv.Counters = append(dv.Counters, rv)
		}
		v.Descriptors = append(v.Descriptors, dv)
	}
	if len(keys) > 0 {
		cs.resetDone(len(keys))
	}
	texts := make([]string, len(q.descs))
	for i, d := range q.descs {
		texts[i] = cs.values.Descriptor(d.entries)
	}
	cs.log.Warn("counters reset through the admin endpoint",
		zap.String("remote_addr", r.RemoteAddr),
		zap.String("domain", q.domain),
		zap.Strings("descriptors", texts),
		zap.Int("counters", len(keys)),
		zap.Int("deleted", deleted),
		zap.Int("failed", failed),
	)
	code := http.StatusOK
	if failed > 0 {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // the client went away
}
