package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

const rules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value: "t*"
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: plan-preview}
`

func engine(t *testing.T, m *metrics.Metrics) *limits.Engine {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	st := store.Timed(memory.New(memory.Options{Now: clk.Now}), m.StoreCalls("memory"))
	return limits.NewEngine(rs, st, limits.EngineOptions{Observer: m})
}

func decide(t *testing.T, e *limits.Engine, kv ...string) {
	t.Helper()
	var descs []limits.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		descs = append(descs, limits.Descriptor{Entries: []limits.Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	var d limits.Decision
	if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: descs}, &d); err != nil {
		t.Fatal(err)
	}
}

func TestRuleCountersExact(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	e := engine(t, m)
	for range 12 {
		decide(t, e, "user", "alice")
	}
	decide(t, e, "plan", "gold")
	decide(t, e, "plan", "gold")
	var d limits.Decision
	e.Decide(context.Background(), &limits.Request{}, &d) //nolint:errcheck // an invalid request, counted below

	want := `
# HELP ratelimit_sidecar_rule_hits_total Hits checked against a rule's limit.
# TYPE ratelimit_sidecar_rule_hits_total counter
ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="edge",rule="plan-preview",window="1m0s"} 2
ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 12
# HELP ratelimit_sidecar_rule_over_limit_total Hits a rule's enforced limit rejected.
# TYPE ratelimit_sidecar_rule_over_limit_total counter
ratelimit_sidecar_rule_over_limit_total{algorithm="fixed_window",domain="edge",rule="plan-preview",window="1m0s"} 0
ratelimit_sidecar_rule_over_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 2
# HELP ratelimit_sidecar_rule_near_limit_total Admitted hits past the near-limit ratio of a rule's limit.
# TYPE ratelimit_sidecar_rule_near_limit_total counter
ratelimit_sidecar_rule_near_limit_total{algorithm="fixed_window",domain="edge",rule="plan-preview",window="1m0s"} 1
ratelimit_sidecar_rule_near_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 3
# HELP ratelimit_sidecar_rule_within_limit_total Hits a rule's limit admitted and consumed.
# TYPE ratelimit_sidecar_rule_within_limit_total counter
ratelimit_sidecar_rule_within_limit_total{algorithm="fixed_window",domain="edge",rule="plan-preview",window="1m0s"} 1
ratelimit_sidecar_rule_within_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 10
# HELP ratelimit_sidecar_rule_shadow_mode_total Hits over a shadow-mode limit (admitted anyway).
# TYPE ratelimit_sidecar_rule_shadow_mode_total counter
ratelimit_sidecar_rule_shadow_mode_total{algorithm="fixed_window",domain="edge",rule="plan-preview",window="1m0s"} 1
ratelimit_sidecar_rule_shadow_mode_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 0
# HELP ratelimit_sidecar_decisions_total Decisions by result: ok, over_limit, invalid (bad request) or error (no decision).
# TYPE ratelimit_sidecar_decisions_total counter
ratelimit_sidecar_decisions_total{result="error"} 0
ratelimit_sidecar_decisions_total{result="invalid"} 1
ratelimit_sidecar_decisions_total{result="ok"} 12
ratelimit_sidecar_decisions_total{result="over_limit"} 2
`
	names := []string{
		"ratelimit_sidecar_rule_hits_total", "ratelimit_sidecar_rule_over_limit_total",
		"ratelimit_sidecar_rule_near_limit_total", "ratelimit_sidecar_rule_within_limit_total",
		"ratelimit_sidecar_rule_shadow_mode_total", "ratelimit_sidecar_decisions_total",
	}
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.Registry, "ratelimit_sidecar_decision_duration_seconds"); n != 1 {
		t.Errorf("decision histogram series = %d, want 1", n)
	}
}

// TestCardinalityBounded sends 5000 distinct users through one rule: the
// number of series must not grow with them. Only detailed_metric rules
// name series by value, as they ask to.
func TestCardinalityBounded(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	e := engine(t, m)
	decide(t, e, "user", "u0")
	before := testutil.CollectAndCount(m.Registry)
	for i := range 5000 {
		decide(t, e, "user", fmt.Sprint("u", i))
	}
	if after := testutil.CollectAndCount(m.Registry); after != before {
		t.Errorf("series grew from %d to %d with 5000 users", before, after)
	}
	decide(t, e, "tenant", "t1")
	decide(t, e, "tenant", "t2")
	if got := value(t, m, "ratelimit_sidecar_rule_hits_total", "tenant_t2"); got != 1 {
		t.Errorf("detailed_metric series for t2 = %v, want 1", got)
	}
}

// value returns the value of the series of family name whose rule label is
// rule.
func value(t *testing.T, m *metrics.Metrics, name, rule string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "rule" && l.GetValue() == rule {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s series with rule=%q", name, rule)
	return 0
}

func TestReloadAndBreakerGauges(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	m.Reloaded(config.ReloadStatus{Checksum: "abc", LoadedAt: time.Unix(100, 0)}, nil)
	m.Reloaded(config.ReloadStatus{}, fmt.Errorf("bad"))
	m.BreakerChanged(true, nil)
	want := `
# HELP ratelimit_sidecar_config_last_reload_successful 1 if the last config reload succeeded (or none failed since start).
# TYPE ratelimit_sidecar_config_last_reload_successful gauge
ratelimit_sidecar_config_last_reload_successful 0
# HELP ratelimit_sidecar_config_last_reload_success_timestamp_seconds When the rules in use were loaded, in Unix seconds.
# TYPE ratelimit_sidecar_config_last_reload_success_timestamp_seconds gauge
ratelimit_sidecar_config_last_reload_success_timestamp_seconds 100
# HELP ratelimit_sidecar_config_reloads_total Config reloads of changed files, by result: success or failure.
# TYPE ratelimit_sidecar_config_reloads_total counter
ratelimit_sidecar_config_reloads_total{result="failure"} 1
ratelimit_sidecar_config_reloads_total{result="success"} 1
# HELP ratelimit_sidecar_config_info 1, labelled with the checksum of the rules in use.
# TYPE ratelimit_sidecar_config_info gauge
ratelimit_sidecar_config_info{checksum="abc"} 1
# HELP ratelimit_sidecar_redis_circuit_open 1 while the Redis circuit breaker is open and requests skip Redis.
# TYPE ratelimit_sidecar_redis_circuit_open gauge
ratelimit_sidecar_redis_circuit_open 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"ratelimit_sidecar_config_last_reload_successful", "ratelimit_sidecar_config_last_reload_success_timestamp_seconds",
		"ratelimit_sidecar_config_reloads_total", "ratelimit_sidecar_config_info", "ratelimit_sidecar_redis_circuit_open"); err != nil {
		t.Error(err)
	}
}

// TestObserveFailureMode: with the store down and a failure mode other than
// local, no outcome exists; only hits and the fallback are counted.
func TestObserveFailureMode(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []limits.FailureMode{limits.FailOpen, limits.FailClosed, limits.FailLocal} {
		e := limits.NewEngine(rs, downStore{}, limits.EngineOptions{Observer: m, FailureMode: mode, Local: memory.New(memory.Options{})})
		decide(t, e, "user", "alice")
	}
	// Failure mode error fails the call, and counts as its decision.
	e := limits.NewEngine(rs, downStore{}, limits.EngineOptions{Observer: m, FailureMode: limits.FailError})
	var d limits.Decision
	if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "alice"}}}}}, &d); err == nil {
		t.Fatal("failure mode error: no error")
	}
	want := `
# HELP ratelimit_sidecar_failure_mode_decisions_total Decisions made by a failure mode because the store could not decide.
# TYPE ratelimit_sidecar_failure_mode_decisions_total counter
ratelimit_sidecar_failure_mode_decisions_total{mode="closed"} 1
ratelimit_sidecar_failure_mode_decisions_total{mode="error"} 1
ratelimit_sidecar_failure_mode_decisions_total{mode="local"} 1
ratelimit_sidecar_failure_mode_decisions_total{mode="open"} 1
# HELP ratelimit_sidecar_rule_within_limit_total Hits a rule's limit admitted and consumed.
# TYPE ratelimit_sidecar_rule_within_limit_total counter
ratelimit_sidecar_rule_within_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1m0s"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"ratelimit_sidecar_failure_mode_decisions_total", "ratelimit_sidecar_rule_within_limit_total"); err != nil {
		t.Error(err)
	}
}

type downStore struct{}

func (downStore) Apply(context.Context, *limits.Batch) error { return limits.ErrStoreUnavailable }

// series returns how many series of family name have a rule label that
// starts with prefix, and their sum.
func series(t *testing.T, m *metrics.Metrics, name, prefix string) (n int, sum float64) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "rule" && strings.HasPrefix(l.GetValue(), prefix) {
					n++
					sum += s.GetCounter().GetValue()
				}
			}
		}
	}
	return n, sum
}

// TestDetailedMetricCapped sends 5000 distinct tenants through a
// detailed_metric rule, as clients that invent header values would: only
// the first 100 get series, the rest are counted in the rule's overflow
// series and in metric_values_overflowed_total. A reload (new rules, same
// rule) must not make room for another 100.
func TestDetailedMetricCapped(t *testing.T) {
	const maxValues = 100
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, maxValues)
	e := engine(t, m)
	for i := range 5000 {
		decide(t, e, "tenant", fmt.Sprint("t", i))
	}
	// A tenant with a series keeps it once the rule is full.
	decide(t, e, "tenant", "t7")

	const hits = "ratelimit_sidecar_rule_hits_total"
	n, sum := series(t, m, hits, "tenant_")
	if n != maxValues || sum != maxValues+1 {
		t.Errorf("%d tenant series with %v hits, want %d with %d", n, sum, maxValues, maxValues+1)
	}
	if got := value(t, m, hits, "tenant_t7"); got != 2 {
		t.Errorf("hits of tenant_t7 = %v, want 2", got)
	}
	if got := value(t, m, hits, "_other.tenant_t*"); got != 5000-maxValues {
		t.Errorf("overflow series = %v, want %d", got, 5000-maxValues)
	}
	if got := value(t, m, "ratelimit_sidecar_metric_values_overflowed_total", "tenant_t*"); got != 5000-maxValues {
		t.Errorf("overflowed = %v, want %d", got, 5000-maxValues)
	}

	before := testutil.CollectAndCount(m.Registry)
	e.SetRules(engine(t, m).Rules())
	for i := range 1000 {
		decide(t, e, "tenant", fmt.Sprint("new", i))
	}
	if after := testutil.CollectAndCount(m.Registry); after != before {
		t.Errorf("series grew from %d to %d after a reload", before, after)
	}
}

// TestDetailedMetricLongNames: a value name longer than
// MaxValueNameBytes goes to the overflow series even while the rule has
// room, so that long header values cannot grow the series' size.
func TestDetailedMetricLongNames(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	e := engine(t, m)
	long := "t" + strings.Repeat("x", metrics.MaxValueNameBytes)
	decide(t, e, "tenant", long)
	decide(t, e, "tenant", "t1")
	if n, _ := series(t, m, "ratelimit_sidecar_rule_hits_total", "tenant_"); n != 1 {
		t.Errorf("%d tenant series, want 1 (t1's)", n)
	}
	if got := value(t, m, "ratelimit_sidecar_rule_hits_total", "_other.tenant_t*"); got != 1 {
		t.Errorf("overflow series = %v, want 1", got)
	}
}

// TestDetailedMetricNone: with no room at all, every value is counted in
// the overflow series, and rules without detailed metrics are untouched.
func TestDetailedMetricNone(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, 0)
	e := engine(t, m)
	decide(t, e, "tenant", "t1", "user", "u1")
	decide(t, e, "tenant", "t2")
	if n, _ := series(t, m, "ratelimit_sidecar_rule_hits_total", "tenant_"); n != 0 {
		t.Errorf("%d tenant series, want 0", n)
	}
	if got := value(t, m, "ratelimit_sidecar_rule_hits_total", "_other.tenant_t*"); got != 2 {
		t.Errorf("overflow series = %v, want 2", got)
	}
	if got := value(t, m, "ratelimit_sidecar_rule_hits_total", "user"); got != 1 {
		t.Errorf("user series = %v, want 1", got)
	}
}

// TestDetailedMetricTwoLimits: a descriptor that overflows a rule with two
// limits is one overflowed descriptor, though both limits count its hits.
func TestDetailedMetricTwoLimits(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, 1)
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: path
    detailed_metric: true
    rate_limits:
      - {unit: minute, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 100}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{Observer: m})
	decide(t, e, "path", "/a")
	decide(t, e, "path", "/b")
	decide(t, e, "path", "/c")
	if n, sum := series(t, m, "ratelimit_sidecar_rule_hits_total", "path_"); n != 2 || sum != 2 {
		t.Errorf("%d path series with %v hits, want 2 (one per limit) with 2", n, sum)
	}
	if n, sum := series(t, m, "ratelimit_sidecar_rule_hits_total", "_other.path"); n != 2 || sum != 4 {
		t.Errorf("%d overflow series with %v hits, want 2 (one per limit) with 4", n, sum)
	}
	if got := value(t, m, "ratelimit_sidecar_metric_values_overflowed_total", "path"); got != 2 {
		t.Errorf("overflowed = %v, want 2", got)
	}
}

// TestOverrideNotCached: Envoy's per-request limits are new for every
// request, so caching their counters by limit would keep one entry per
// request until the next reload.
func TestOverrideNotCached(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	e := engine(t, m)
	for i := range 1000 {
		req := &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{
			Entries:  []limits.Entry{{Key: "user", Value: fmt.Sprint("u", i)}},
			Override: &limits.Override{Requests: 5, Unit: limits.Unit(1 + i%2)}, // second or minute
		}}}
		var d limits.Decision
		if err := e.Decide(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
	}
	if n := metrics.CacheLen(m); n > 2 {
		t.Errorf("%d cached entries after 1000 overrides, want at most 2", n)
	}
	if got := value(t, m, "ratelimit_sidecar_rule_hits_total", "_override"); got != 500 {
		t.Errorf("hits of the first override series = %v, want 500", got)
	}
}
