// Package metrics defines the sidecar's Prometheus metrics and records
// them: it observes the engine's decisions, times the store, and reports
// reloads and the circuit breaker.
//
// Per-rule series are labelled by domain, rule name, algorithm and window,
// never by a request's values, unless the rule sets detailed_metric or
// value_to_metric. Those rules name a series by the request's values, but
// only for the first maxValues names of each rule (see New); the other
// values share one overflow series. So the number of series is bounded by
// the rules, not by the traffic.
package metrics

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

const ns = "ratelimit_sidecar"

// DefaultMaxValues is the default of New's maxValues: how many names of
// its values a detailed_metric or value_to_metric rule gets series for.
// 100 names are 500 series per limit (about 60 KB of each scrape and
// 0.5 MB of memory), enough for per-tenant or per-route detail, while a
// per-user or per-IP rule, whose values any client can invent, stays
// within a sidecar's 64 MiB memory limit.
const DefaultMaxValues = 100

// MaxValueNameBytes is the longest metric name made of a request's values
// that gets series of its own; longer ones count in the rule's overflow
// series. Values may be kilobytes long (--max-value-bytes), and a name
// holds one per level: without this bound, the names a rule keeps, and
// every scrape, would grow with the values' length, not only their number.
const MaxValueNameBytes = 256

// OverflowPrefix starts the rule label of a rule's overflow series,
// followed by the rule's own name: _other.tenant_t*.user. Values never
// produce it: a rule's metric name starts with its top-level descriptor
// key, and values come only after a '_' that follows a key. Only a rule
// file whose top-level key itself starts with "_other" could produce the
// same label.
const OverflowPrefix = "_other."

// Metrics holds every metric. It is safe for concurrent use.
type Metrics struct {
	// Registry holds the sidecar's metrics plus the Go and process
	// collectors.
	Registry *prometheus.Registry

	nearRatio float64

	ruleHits, ruleOver, ruleNear, ruleWithin, ruleShadow *prometheus.CounterVec
	ruleUsage, ruleUsageOver, ruleUsageLost              *prometheus.CounterVec
	ruleRefund, ruleRefundLost                           *prometheus.CounterVec
	ruleReleased                                         *prometheus.CounterVec

	decisions *prometheus.CounterVec
	// decided holds decisions' children for each result, looked up once
	// so the hot path does not hash the label.
	decided          [4]prometheus.Counter // resultOK, resultOver, resultInvalid, resultError
	decisionSeconds  prometheus.Histogram
	fallbacks        *prometheus.CounterVec
	storeSeconds     *prometheus.HistogramVec
	storeErrors      *prometheus.CounterVec
	breakerOpen      prometheus.Gauge
	reloadSuccessful prometheus.Gauge
	reloadTimestamp  prometheus.Gauge
	reloads          *prometheus.CounterVec
	configInfo       *prometheus.GaugeVec
	overflowed       *prometheus.CounterVec
	pushErrors       *prometheus.CounterVec

	cache atomic.Pointer[ruleCache]

	// maxValues bounds the names of each valueSet.
	maxValues int
	mu        sync.Mutex
	values    map[valuesKey]*valueSet // kept across rulesets
}

// ruleCache maps a ruleset's (rule, limit) pairs to their counters, so the
// hot path does not hash label values. It is replaced when the ruleset
// changes, so entries of old rulesets are dropped.
type ruleCache struct {
	rs *limits.Ruleset
	m  sync.Map // ruleKey → *ruleCounters, or *valueCounters for a rule whose metric name depends on values; overrideKey → *ruleCounters
}

type ruleKey struct {
	rule  *limits.Rule
	limit *limits.Limit
}

// overrideKey is the cache key of Envoy's per-request limits, which are new
// for every request: one key per domain and window, not per limit.
type overrideKey struct {
	domain string
	window time.Duration
}

type ruleCounters struct {
	hits, over, near, within, shadow prometheus.Counter
	// usage charges (limits.Check.Usage): counted, counted past the
	// limit, and not counted at all (a failure mode other than local).
	usage, usageOver, usageLost prometheus.Counter
	// refunds (limits.Check.Refund): hits given back, and those that no
	// store gave back.
	refund, refundLost prometheus.Counter
	// released counts reservations given back unsettled
	// (limits.Outcome.Released).
	released prometheus.Counter
}

// valueCounters are the counters of one limit of a rule whose metric name
// depends on the request's values, by name. It holds only the names its
// valueSet admitted, so at most maxValues.
type valueCounters struct {
	values *valueSet
	labels [3]string // domain, algorithm, window

	mu     sync.RWMutex
	byName map[string]*ruleCounters
	other  atomic.Pointer[ruleCounters] // the overflow series; nil until used
}

// valuesKey names a rule across rulesets: a reload builds new rules, but
// the series they made stay registered, so the bound must hold across
// reloads too.
type valuesKey struct{ domain, rule string }

// valueSet is the metric names of one rule that have series of their own.
type valueSet struct {
	mu sync.RWMutex
	// names maps each name to itself, so that the rule's limits, rulesets
	// and series share one copy of a name, which can be as long as the
	// request's values.
	names      map[string]string
	overflowed prometheus.Counter
}

// Build names the running build, for ratelimit_sidecar_build_info.
type Build struct {
	// Version is the release (v0.1.0), a git describe, or "dev".
	Version string
	// Revision is the commit the build was made from, or "" when
	// unknown.
	Revision string
}

// New creates and registers every metric. nearRatio is the share of
// a limit (0 to 1) past which admitted hits count as near the limit.
// maxValues is how many metric names, made of a request's values, each
// detailed_metric or value_to_metric rule gets series for; later names
// share the rule's overflow series (see OverflowPrefix). With 0, every
// value does.
func New(b Build, nearRatio float64, maxValues int) *Metrics {
	reg := prometheus.NewRegistry()
	ruleLabels := []string{"domain", "rule", "algorithm", "window"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	latency := []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1}
	m := &Metrics{
		Registry:       reg,
		nearRatio:      nearRatio,
		ruleHits:       counter("rule_hits_total", "Hits checked against a rule's limit.", ruleLabels...),
		ruleOver:       counter("rule_over_limit_total", "Hits a rule's enforced limit rejected.", ruleLabels...),
		ruleNear:       counter("rule_near_limit_total", "Admitted hits past the near-limit ratio of a rule's limit.", ruleLabels...),
		ruleWithin:     counter("rule_within_limit_total", "Hits a rule's limit admitted and consumed.", ruleLabels...),
		ruleUsage:      counter("rule_usage_total", "Hits of usage charges (a descriptor's own hits_addend, or charge: usage) a rule's limit counted, over or not; not in within_limit or over_limit.", ruleLabels...),
		ruleUsageOver:  counter("rule_usage_over_total", "Hits of usage charges that did not fit in what a rule's limit had left, counted all the same as debt.", ruleLabels...),
		ruleUsageLost:  counter("rule_usage_lost_total", "Hits of usage charges that no store counted: the store could not decide and the failure mode was not local.", ruleLabels...),
		ruleRefund:     counter("rule_refund_total", "Hits given back to a rule's limit (Envoy's is_negative_hits): never rejected, and not in hits, within_limit or over_limit.", ruleLabels...),
		ruleRefundLost: counter("rule_refund_lost_total", "Hits of refunds that no store gave back: the store could not decide and the failure mode was not local.", ruleLabels...),
		ruleReleased:   counter("rule_reservations_released_total", "Reservations (release_after) that reached their time unsettled and were given back: stream-end calls that never came.", ruleLabels...),
		ruleShadow:     counter("rule_shadow_mode_total", "Hits over a shadow-mode limit (admitted anyway).", ruleLabels...),
		decisions:      counter("decisions_total", "Decisions by result: ok, over_limit, invalid (bad request) or error (no decision).", "result"),
		decisionSeconds: func() prometheus.Histogram {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "decision_duration_seconds", Help: "Time to decide one request, store included.", Buckets: latency})
			reg.MustRegister(h)
			return h
		}(),
		fallbacks: counter("failure_mode_decisions_total", "Decisions made by a failure mode because the store could not decide.", "mode"),
		storeSeconds: func() *prometheus.HistogramVec {
			h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "store_duration_seconds", Help: "Time of one store call.", Buckets: latency}, []string{"store"})
			reg.MustRegister(h)
			return h
		}(),
		storeErrors:      counter("store_errors_total", "Store calls that failed, by kind: timeout, unavailable or other. Requests the open circuit breaker kept from Redis are not store calls; see failure_mode_decisions_total.", "store", "kind"),
		breakerOpen:      gauge("redis_circuit_open", "1 while the Redis circuit breaker is open and requests skip Redis."),
		reloadSuccessful: gauge("config_last_reload_successful", "1 if the last config reload succeeded (or none failed since start)."),
		reloadTimestamp:  gauge("config_last_reload_success_timestamp_seconds", "When the rules in use were loaded, in Unix seconds."),
		reloads:          counter("config_reloads_total", "Config reloads of changed files, by result: success or failure.", "result"),
		configInfo: func() *prometheus.GaugeVec {
			g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "config_info", Help: "1, labelled with the checksum of the rules in use."}, []string{"checksum"})
			reg.MustRegister(g)
			return g
		}(),
		overflowed: counter("metric_values_overflowed_total", "Descriptors that a detailed_metric or value_to_metric rule counted under its rule=\"_other.<rule>\" series, because its other values already had --metric-max-values series.", "domain", "rule"),
		pushErrors: counter("metrics_push_errors_total", "Pushes of metrics that failed, by sink: statsd (the dial or the writes of one flush; what it did not send, the next flush does) or otlp (one export).", "sink"),
		maxValues:  max(maxValues, 0),
		values:     map[valuesKey]*valueSet{},
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info", Help: "1, labelled with the build's version, Go version and commit (revision, empty when unknown)."}, []string{"version", "goversion", "revision"})
	reg.MustRegister(build)
	build.WithLabelValues(b.Version, runtime.Version(), b.Revision).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reloadSuccessful.Set(1)
	for i, r := range []string{"ok", "over_limit", "invalid", "error"} {
		m.decided[i] = m.decisions.WithLabelValues(r)
	}
	return m
}

// Indexes of Metrics.decided.
const (
	resultOK = iota
	resultOver
	resultInvalid
	resultError
)

// Observe implements limits.Observer.
func (m *Metrics) Observe(req *limits.Request, d *limits.Decision, took time.Duration, err error) {
	m.decisionSeconds.Observe(took.Seconds())
	if d.StoreErr != nil {
		// Failure mode error counts too: it decided that the call fails.
		m.fallbacks.WithLabelValues(d.Fallback.String()).Inc()
	}
	switch {
	case err != nil && errors.As(err, new(*limits.RequestError)):
		m.decided[resultInvalid].Inc()
		return
	case err != nil:
		m.decided[resultError].Inc()
		return
	case d.Code == limits.OverLimit:
		m.decided[resultOver].Inc()
	default:
		m.decided[resultOK].Inc()
	}
	if d.Rules == nil {
		return
	}
	cache := m.cache.Load()
	if cache == nil || cache.rs != d.Rules {
		cache = &ruleCache{rs: d.Rules}
		m.cache.Store(cache)
	}
	// With a failure mode other than local, no store decided: count the
	// hits only.
	decided := d.StoreErr == nil || d.Fallback == limits.FailLocal
	checks, outs := d.Checks(), d.Outcomes()
	counted := -1 // the last descriptor counted as overflowed
	for j := range checks {
		c := &checks[j]
		owner := d.Descriptor(j)
		st := &d.Statuses[owner]
		rc, vs := m.counters(cache, req.Domain, st.Rule, c.Limit, req.Descriptors[owner].Entries)
		if vs != nil && counted != owner {
			// A descriptor's checks are consecutive; count it once.
			vs.overflowed.Inc()
			counted = owner
		}
		var out *limits.Outcome // nil: no store decided c
		if decided && j < len(outs) {
			out = &outs[j]
		}
		m.countCheck(rc, c, out, decided, d.Admitted())
	}
}

// countCheck counts one check's hits in its limit's counters rc: as a
// refund, as usage, or by out, its outcome (nil if no store decided it;
// decided is whether the store or failure mode local decided the
// request), and admitted, the request's verdict.
func (m *Metrics) countCheck(rc *ruleCounters, c *limits.Check, out *limits.Outcome, decided, admitted bool) {
	hits := float64(c.Hits)
	if out != nil && out.Released > 0 {
		rc.released.Add(float64(out.Released))
	}
	if c.Refund {
		if decided {
			rc.refund.Add(hits)
		} else {
			rc.refundLost.Add(hits)
		}
		return
	}
	rc.hits.Add(hits)
	usage := c.Usage && c.Hits > 0
	if usage && !decided {
		rc.usageLost.Add(hits)
	}
	if out == nil {
		return
	}
	switch {
	case usage:
		// Counted whatever the verdict: served, not rejected.
		rc.usage.Add(hits)
		if out.Over && !out.Unknown {
			rc.usageOver.Add(hits)
		}
	case out.Over && c.Limit.Shadow:
		rc.shadow.Add(hits)
	case out.Over:
		rc.over.Add(hits)
	case admitted:
		rc.within.Add(hits)
		if c.Limit.Requests > 0 && float64(c.Limit.Requests-out.Remaining) >= m.nearRatio*float64(c.Limit.Requests) {
			rc.near.Add(hits)
		}
	}
}

// counters returns the counters of one rule's limit, from the cache unless
// the rule's metric name depends on the request's values. When it does
// and the name overflowed, counters returns the overflow series and the
// rule's valueSet, to count the overflow.
func (m *Metrics) counters(cache *ruleCache, domain string, r *limits.Rule, l *limits.Limit, entries []limits.Entry) (*ruleCounters, *valueSet) {
	if r == nil {
		key := overrideKey{domain, l.Window()}
		c, ok := cache.m.Load(key)
		if !ok {
			c, _ = cache.m.LoadOrStore(key, m.newCounters(domain, r, l))
		}
		return c.(*ruleCounters), nil
	}
	key := ruleKey{r, l}
	c, ok := cache.m.Load(key)
	if !ok {
		c, _ = cache.m.LoadOrStore(key, m.newCounters(domain, r, l))
	}
	if rc, ok := c.(*ruleCounters); ok {
		return rc, nil
	}
	vc := c.(*valueCounters)
	// Up to 256 bytes of name are built on the stack.
	var buf [256]byte
	name := r.AppendMetricName(buf[:0], entries)
	vc.mu.RLock()
	rc := vc.byName[string(name)]
	vc.mu.RUnlock()
	if rc != nil {
		return rc, nil
	}
	return m.admit(vc, name, r)
}

// newCounters returns the cache entry of one rule's limit.
func (m *Metrics) newCounters(domain string, r *limits.Rule, l *limits.Limit) any {
	alg, window := l.Algorithm.String(), l.Window().String()
	switch {
	case r == nil:
		// Envoy's per-request limit: no rule to name.
		return m.ruleCounters(domain, "_override", alg, window)
	case l.Name != "":
		return m.ruleCounters(domain, l.Name, alg, window)
	case !r.DetailedMetric && !valueToMetric(r):
		return m.ruleCounters(domain, r.Name, alg, window)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := valuesKey{domain, r.Name}
	vs := m.values[k]
	if vs == nil {
		vs = &valueSet{names: map[string]string{}, overflowed: m.overflowed.WithLabelValues(domain, r.Name)}
		m.values[k] = vs
	}
	return &valueCounters{values: vs, labels: [3]string{domain, alg, window}, byName: map[string]*ruleCounters{}}
}

// admit returns the counters of name, which vc does not hold yet: its own
// series if the rule has room for another name or already has one for it
// (under another of its limits, or in an earlier ruleset), else the
// overflow series and the valueSet, to count the overflow. Overflowing
// takes no exclusive lock and allocates nothing.
func (m *Metrics) admit(vc *valueCounters, name []byte, r *limits.Rule) (*ruleCounters, *valueSet) {
	vs := vc.values
	vs.mu.RLock()
	s, known := vs.names[string(name)]
	full := len(vs.names) >= m.maxValues
	vs.mu.RUnlock()
	if !known && !full && len(name) <= MaxValueNameBytes {
		vs.mu.Lock()
		s, known = vs.names[string(name)]
		if !known && len(vs.names) < m.maxValues {
			s = string(name)
			vs.names[s] = s
			known = true
		}
		vs.mu.Unlock()
	}
	if !known {
		rc := vc.other.Load()
		if rc == nil {
			// Racing callers build the same children: the vectors
			// hand out one child per label set.
			rc = m.ruleCounters(vc.labels[0], OverflowPrefix+r.Name, vc.labels[1], vc.labels[2])
			vc.other.Store(rc)
		}
		return rc, vs
	}
	vc.mu.Lock()
	defer vc.mu.Unlock()
	rc := vc.byName[s]
	if rc == nil {
		rc = m.ruleCounters(vc.labels[0], s, vc.labels[1], vc.labels[2])
		vc.byName[s] = rc
	}
	return rc, nil
}

// ruleCounters returns the series of one rule name.
func (m *Metrics) ruleCounters(domain, name, alg, window string) *ruleCounters {
	labels := []string{domain, name, alg, window}
	return &ruleCounters{
		hits:       m.ruleHits.WithLabelValues(labels...),
		over:       m.ruleOver.WithLabelValues(labels...),
		near:       m.ruleNear.WithLabelValues(labels...),
		within:     m.ruleWithin.WithLabelValues(labels...),
		usage:      m.ruleUsage.WithLabelValues(labels...),
		usageOver:  m.ruleUsageOver.WithLabelValues(labels...),
		usageLost:  m.ruleUsageLost.WithLabelValues(labels...),
		refund:     m.ruleRefund.WithLabelValues(labels...),
		refundLost: m.ruleRefundLost.WithLabelValues(labels...),
		released:   m.ruleReleased.WithLabelValues(labels...),
		shadow:     m.ruleShadow.WithLabelValues(labels...),
	}
}

func valueToMetric(r *limits.Rule) bool {
	for _, a := range r.Lineage() {
		if a.ValueToMetric {
			return true
		}
	}
	return false
}

// Reloaded records a reload attempt of changed files.
func (m *Metrics) Reloaded(st config.ReloadStatus, err error) {
	if err != nil {
		m.reloadSuccessful.Set(0)
		m.reloads.WithLabelValues("failure").Inc()
		return
	}
	m.reloadSuccessful.Set(1)
	m.reloads.WithLabelValues("success").Inc()
	m.Loaded(st.Checksum, st.LoadedAt)
}

// Loaded records the rules in use.
func (m *Metrics) Loaded(checksum string, at time.Time) {
	m.reloadTimestamp.Set(float64(at.UnixNano()) / 1e9)
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(checksum).Set(1)
}

// BreakerChanged records the circuit breaker's state; it fits
// store.BreakerOptions.OnChange.
func (m *Metrics) BreakerChanged(open bool, _ error) {
	if open {
		m.breakerOpen.Set(1)
	} else {
		m.breakerOpen.Set(0)
	}
}

// DenyCacheStats is what the deny cache reports: store.DenyCache.
type DenyCacheStats interface {
	Answered() uint64
	Dropped() uint64
	Len() int
}

// DenyCache registers the deny cache's metrics, read from c at scrape
// time.
func (m *Metrics) DenyCache(c DenyCacheStats) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "deny_cache_answered_total",
			Help: "Requests rejected by the deny cache without a store call: a key of theirs was known to be over its limit."},
			func() float64 { return float64(c.Answered()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "deny_cache_dropped_total",
			Help: "Over-limit answers the deny cache could not remember because it was full."},
			func() float64 { return float64(c.Dropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "deny_cache_entries",
			Help: "Keys the deny cache remembers, expired ones not yet swept included."},
			func() float64 { return float64(c.Len()) }),
	)
}

// MemoryStoreStats is what a memory store reports: memory.Store.
type MemoryStoreStats interface {
	Len() int
	Evictions() uint64
	GhostStarts() uint64
}

// MemoryStore registers a memory store's metrics, read from s at scrape
// time, under the label store=name.
func (m *Metrics) MemoryStore(name string, s MemoryStoreStats) {
	l := prometheus.Labels{"store": name}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "memory_store_keys", ConstLabels: l,
			Help: "Keys a memory store holds, expired ones not yet swept included."},
			func() float64 { return float64(s.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "memory_store_evictions_total", ConstLabels: l,
			Help: "Live keys a memory store evicted to stay within --memory-max-keys, each folded into its ghost table."},
			func() float64 { return float64(s.Evictions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "memory_store_ghost_starts_total", ConstLabels: l,
			Help: "Checks of keys a memory store did not hold that started from its ghost table rather than fresh: each may have been stricter than if nothing had been evicted."},
			func() float64 { return float64(s.GhostStarts()) }),
	)
}

// RedisConfigStats is what the Redis store reports of its refusals for
// the sidecar's configuration (authentication, ACL, TLS): redis.Lazy.
type RedisConfigStats interface {
	ConfigErrorsTotal(kind string) uint64
	ConfigErrorActive(kind string) bool
}

// RedisConfigErrors registers the metrics of refusals of each of kinds,
// read from s at scrape time: a counter of refusals that started or
// changed (one per Error line the sidecar logs), and a gauge that is 1
// while a Redis node or sentinel refuses so.
func (m *Metrics) RedisConfigErrors(kinds []string, s RedisConfigStats) {
	for _, kind := range kinds {
		l := prometheus.Labels{"kind": kind}
		m.Registry.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "redis_config_errors_total", ConstLabels: l,
				Help: "Refusals of the sidecar by Redis or a sentinel for its configuration, by kind (auth, acl, tls), counted as each starts or changes."},
				func() float64 { return float64(s.ConfigErrorsTotal(kind)) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "redis_config_error", ConstLabels: l,
				Help: "1 while a Redis node or sentinel refuses the sidecar for its configuration, by kind (auth, acl, tls); /readyz fails meanwhile."},
				func() float64 {
					if s.ConfigErrorActive(kind) {
						return 1
					}
					return 0
				}),
		)
	}
}

// StoreCalls returns the observer of one store's calls, for store.Timed:
// it times them and counts their errors under the label name.
func (m *Metrics) StoreCalls(name string) *StoreCalls {
	return &StoreCalls{
		seconds:     m.storeSeconds.WithLabelValues(name),
		timeouts:    m.storeErrors.WithLabelValues(name, "timeout"),
		unavailable: m.storeErrors.WithLabelValues(name, "unavailable"),
		other:       m.storeErrors.WithLabelValues(name, "other"),
	}
}

// StoreCalls records one store's calls. It implements store.CallObserver.
type StoreCalls struct {
	seconds                      prometheus.Observer
	timeouts, unavailable, other prometheus.Counter
}

// ObserveCall records one call.
func (c *StoreCalls) ObserveCall(took time.Duration, err error) {
	c.seconds.Observe(took.Seconds())
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		c.timeouts.Inc()
	case errors.Is(err, limits.ErrStoreUnavailable):
		c.unavailable.Inc()
	default:
		c.other.Inc()
	}
}
