package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// CounterStore is a backend whose counters the endpoints read and
// reset: memory.Store and redis.Lazy.
type CounterStore interface {
	Inspect(ctx context.Context, key string, l *limits.Limit) (limits.State, time.Time, error)
	Reset(ctx context.Context, key string, l *limits.Limit) (bool, error)
}

// storeKeyer is a backend whose keys are not the counters' own: Redis
// prefixes them.
type storeKeyer interface {
	StoreKey(key string) string
}

// DenyCache is what the endpoints read and drop of a deny cache:
// store.DenyCache.
type DenyCache interface {
	Entry(key string) (store.DenyEntry, bool)
	Forget(key string) bool
}

// LeaseHolder is what the endpoints read and drop of leases:
// store.Leases.
type LeaseHolder interface {
	Lease(key string) (store.LeaseState, bool)
	Drop(key string) (held uint64, ok bool)
}

// CountersOptions are what /debug/counters and its reset read.
type CountersOptions struct {
	// Rules returns the rules in use, and Validate checks a request as
	// the engine does. Required.
	Rules    func() *limits.Ruleset
	Validate func(*limits.Request) error
	// Store is the backend, past the middleware; nil if it cannot show
	// its counters (the endpoints then answer 501). StoreName names it.
	Store     CounterStore
	StoreName string
	// Deny and Leases are this sidecar's deny cache and leases; nil
	// where there are none.
	Deny   DenyCache
	Leases LeaseHolder
	// AllowReset is --admin-counter-reset: without it a reset is 403.
	AllowReset bool
	Log        *zap.Logger
	// Values is how a reset's log line shows descriptor values.
	Values rejectlog.Values
	// ResetDone, if set, counts n counters reset.
	ResetDone func(n int)
}

// counters serves GET /debug/counters and POST /debug/counters/reset:
// for each descriptor of a request, the counters of the limits the rules
// give it, as the backend holds them, and what this sidecar's deny cache
// and leases hold for them.
type counters struct{ CountersOptions }

// descriptor is one descriptor parameter: what was typed and its entries.
type descriptor struct {
	text    string
	entries []limits.Entry
}

// counterTimeout bounds one request's store calls, whatever the client's
// patience.
const counterTimeout = 5 * time.Second

// maxCounterBody bounds a reset's form body.
const maxCounterBody = 64 << 10

// CountersView is GET /debug/counters's JSON.
type CountersView struct {
	Domain      string                  `json:"domain"`
	Store       string                  `json:"store"`
	Descriptors []CounterDescriptorView `json:"descriptors"`
}

type CounterDescriptorView struct {
	Descriptor string `json:"descriptor"`
	// Result and Reason are limits.Explain's: how the rules matched.
	Result   string        `json:"result"`
	Reason   string        `json:"reason"`
	Rule     string        `json:"rule,omitempty"`
	Source   string        `json:"source,omitempty"`
	Counters []CounterView `json:"counters,omitempty"`
}

// CounterView is one limit's counter. Remaining, Reset and Over are what
// a zero-hit check would answer now, from the state read: Over means the
// next hit is rejected.
type CounterView struct {
	Limit     string     `json:"limit"`
	Key       string     `json:"key,omitempty"`
	KeyHash   string     `json:"key_sha256,omitempty"`
	Now       *time.Time `json:"now,omitempty"`
	State     *StateView `json:"state,omitempty"`
	Remaining *uint64    `json:"remaining,omitempty"`
	Reset     string     `json:"reset,omitempty"`
	Over      *bool      `json:"over,omitempty"`
	DenyCache *DenyView  `json:"deny_cache,omitempty"`
	Lease     *LeaseView `json:"lease,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// StateView is a counter's stored state, decoded for its algorithm. A
// nil field does not apply to the algorithm.
type StateView struct {
	// Fresh: nothing is stored; the counter starts from zero.
	Fresh bool `json:"fresh,omitempty"`
	// Fixed and sliding window.
	WindowStart  *time.Time `json:"window_start,omitempty"`
	Hits         *uint64    `json:"hits,omitempty"`
	PreviousHits *uint64    `json:"previous_window_hits,omitempty"`
	// Sliding log: the hits still in the window, oldest first.
	Entries []LogEntryView `json:"entries,omitempty"`
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
	// Concurrency: the requests in flight, soonest to expire first.
	Slots []SlotView `json:"slots,omitempty"`
	// Debt is how far usage charges took the counter past its limit, in
	// hits (tokens below empty, for a bucket): until it is repaid, every
	// request is over. Absent when there is none.
	Debt *float64 `json:"debt,omitempty"`
}

type LogEntryView struct {
	At   time.Time `json:"at"`
	Hits uint64    `json:"hits"`
}

// DenyView is this sidecar's deny cache entry for a counter: requests of
// Probe or more hits are rejected without the store until Until.
type DenyView struct {
	Probe uint64    `json:"probe"`
	Until time.Time `json:"until"`
}

// LeaseView is this sidecar's lease of a counter: Held hits to admit
// without the store until Until.
type LeaseView struct {
	Held  uint64    `json:"held"`
	Until time.Time `json:"until"`
}

// ResetView is POST /debug/counters/reset's JSON.
type ResetView struct {
	Domain      string                `json:"domain"`
	Store       string                `json:"store"`
	Descriptors []ResetDescriptorView `json:"descriptors"`
}

type ResetDescriptorView struct {
	Descriptor string             `json:"descriptor"`
	Result     string             `json:"result"`
	Counters   []ResetCounterView `json:"counters,omitempty"`
}

type ResetCounterView struct {
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
	if err := cs.Validate(&req); err != nil {
		return q, err
	}
	return q, nil
}

// storeKey is the key under which the backend holds key.
func (cs *counters) storeKey(key string) string {
	if k, ok := cs.Store.(storeKeyer); ok {
		return k.StoreKey(key)
	}
	return key
}

// begin starts a counters request: the store must be able to verb its
// counters, and the query must parse. When it cannot go on, begin has
// answered and reports false; else the caller must call cancel.
func (cs *counters) begin(w http.ResponseWriter, r *http.Request, verb string) (counterQuery, context.Context, context.CancelFunc, bool) {
	if cs.Store == nil {
		http.Error(w, "the "+cs.StoreName+" store cannot "+verb+" its counters", http.StatusNotImplemented)
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
	rs := cs.Rules()
	v := CountersView{Domain: q.domain, Store: cs.StoreName, Descriptors: []CounterDescriptorView{}}
	for _, d := range q.descs {
		x := rs.Explain(q.domain, d.entries)
		dv := CounterDescriptorView{Descriptor: d.text, Result: x.Result.String(), Reason: x.Reason}
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
func (cs *counters) counter(ctx context.Context, k limits.KeyedLimit) CounterView {
	l := k.Limit
	cv := CounterView{Limit: l.String()}
	if k.Key == "" {
		return cv // unlimited: no counter
	}
	cv.Key, cv.KeyHash = cs.storeKey(k.Key), rejectlog.Hash(k.Key)
	st, now, err := cs.Store.Inspect(ctx, k.Key, l)
	if err != nil {
		cv.Error = err.Error()
	} else {
		out, _ := l.Evaluate(st, now.UnixMicro(), 0)
		now = now.UTC()
		cv.Now, cv.State = &now, viewState(l, st, now)
		cv.Remaining, cv.Reset, cv.Over = &out.Remaining, out.Reset.String(), &out.Over
	}
	if cs.Deny != nil {
		if e, ok := cs.Deny.Entry(k.Key); ok && e.Limit.CountsLike(l) {
			cv.DenyCache = &DenyView{Probe: e.Probe, Until: e.Until.UTC()}
		}
	}
	if cs.Leases != nil {
		if ls, ok := cs.Leases.Lease(k.Key); ok && ls.Limit.CountsLike(l) {
			cv.Lease = &LeaseView{Held: ls.Held, Until: ls.Until.UTC()}
		}
	}
	return cv
}

// SlotView is a request in flight on a concurrency limit: its hold (the
// request's id) and when its slot expires unless a refund frees it.
type SlotView struct {
	Hold  string    `json:"hold"`
	Until time.Time `json:"until"`
}

// viewState decodes st, a counter's state under l, as of now.
func viewState(l *limits.Limit, st limits.State, now time.Time) *StateView {
	if st.Start == 0 && st.Count == 0 && st.Prev == 0 && len(st.Log) == 0 && len(st.Slots) == 0 && st.Expire == 0 {
		return &StateView{Fresh: true}
	}
	at := func(us int64) *time.Time {
		t := time.UnixMicro(us).UTC()
		return &t
	}
	v := &StateView{}
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
				v.Entries = append(v.Entries, LogEntryView{At: time.UnixMicro(e.At).UTC(), Hits: e.Hits})
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
	case limits.Concurrency:
		v.Expires = at(st.Expire)
		for _, sl := range st.Slots {
			if sl.Until > now.UnixMicro() {
				v.Slots = append(v.Slots, SlotView{Hold: sl.Hold, Until: time.UnixMicro(sl.Until).UTC()})
			}
		}
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
	if !cs.AllowReset {
		http.Error(w, "counter reset is off: start the sidecar with --admin-counter-reset to allow it", http.StatusForbidden)
		return
	}
	q, ctx, cancel, ok := cs.begin(w, r, "reset")
	if !ok {
		return
	}
	defer cancel()
	rs := cs.Rules()
	v := ResetView{Domain: q.domain, Store: cs.StoreName, Descriptors: []ResetDescriptorView{}}
	var keys []string
	deleted, failed := 0, 0
	for _, d := range q.descs {
		x := rs.Explain(q.domain, d.entries)
		dv := ResetDescriptorView{Descriptor: d.text, Result: x.Result.String()}
		for _, k := range x.Limits {
			if k.Key == "" {
				continue
			}
			rv := ResetCounterView{Limit: k.Limit.String(), Key: cs.storeKey(k.Key)}
			gone, err := cs.Store.Reset(ctx, k.Key, k.Limit)
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
				if cs.Deny != nil {
					rv.DenyCacheDropped = cs.Deny.Forget(k.Key)
				}
				if cs.Leases != nil {
					if held, ok := cs.Leases.Drop(k.Key); ok {
						rv.LeaseDropped = &held
					}
				}
			}
			dv.Counters = append(dv.Counters, rv)
		}
		v.Descriptors = append(v.Descriptors, dv)
	}
	if len(keys) > 0 {
		if cs.ResetDone != nil {
			cs.ResetDone(len(keys))
		}
	}
	texts := make([]string, len(q.descs))
	for i, d := range q.descs {
		texts[i] = cs.Values.Descriptor(d.entries)
	}
	cs.Log.Warn("counters reset through the admin endpoint",
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
