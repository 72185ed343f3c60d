package metrics

import (
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// refMetrics serves our metrics under the names envoyproxy/ratelimit's
// Prometheus metrics have, with its default statsd_exporter mapping (its
// src/stats/prom/default_mapper.yaml, which Envoy Gateway ships too), so
// that dashboards and alerts built on the reference keep working
// (--reference-metrics, Handler). It reads our registry at each scrape and derives
// the reference's series from ours: nothing is counted twice, and the
// decisions pay nothing for it.
//
// Its names do not carry our ratelimit_sidecar_ prefix on purpose: they
// are the reference's. docs/migration.md maps each to ours.
type refMetrics struct {
	ours  prometheus.Gatherer
	rules func() *limits.Ruleset

	// refPaths of the ruleset last scraped: the walk of a large rule
	// tree is paid once per ruleset, not per scrape.
	mu      sync.Mutex // guards pathsOf and paths
	pathsOf *limits.Ruleset
	paths   map[[2]string]string
}

// pathsFor returns refPaths(rs), computed once per ruleset.
func (r *refMetrics) pathsFor(rs *limits.Ruleset) map[[2]string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pathsOf != rs {
		r.pathsOf, r.paths = rs, refPaths(rs)
	}
	return r.paths
}

var (
	refRuleLabels = []string{"domain", "key1", "key2"}
	// refRuleStats maps our per-rule counters to the reference's.
	refRuleStats = map[string]*prometheus.Desc{
		"ratelimit_sidecar_rule_hits_total":         refDesc("ratelimit_service_rate_limit_total_hits", "Hits checked against a rule's limit (envoyproxy/ratelimit's total_hits).", refRuleLabels),
		"ratelimit_sidecar_rule_within_limit_total": refDesc("ratelimit_service_rate_limit_within_limit", "Hits a rule's limit admitted (envoyproxy/ratelimit's within_limit).", refRuleLabels),
		"ratelimit_sidecar_rule_near_limit_total":   refDesc("ratelimit_service_rate_limit_near_limit", "Admitted hits past the near-limit ratio (envoyproxy/ratelimit's near_limit).", refRuleLabels),
		"ratelimit_sidecar_rule_over_limit_total":   refDesc("ratelimit_service_rate_limit_over_limit", "Hits a rule's enforced limit rejected (envoyproxy/ratelimit's over_limit).", refRuleLabels),
		"ratelimit_sidecar_rule_shadow_mode_total":  refDesc("ratelimit_service_rate_limit_shadow_mode", "Hits over a shadow-mode limit (envoyproxy/ratelimit's shadow_mode).", refRuleLabels),
	}
	refTotalRequests = refDesc("ratelimit_service_total_requests", "ShouldRateLimit calls decided (envoyproxy/ratelimit's total_requests).", []string{"grpc_method"})
	refResponseTime  = refDesc("ratelimit_service_response_time_seconds", "Time to decide one request, store included (envoyproxy/ratelimit's response_time).", []string{"grpc_method"})
	refCallErrors    = refDesc("ratelimit_service_should_rate_limit_error", "Requests the store could not decide (redis_error) or that were invalid (service_error).", []string{"err_type"})
	refLoadSuccess   = refDesc("ratelimit_service_config_load_success", "Rule loads that succeeded, the first included (envoyproxy/ratelimit's config_load_success).", nil)
	refLoadError     = refDesc("ratelimit_service_config_load_error", "Rule loads that failed (envoyproxy/ratelimit's config_load_error).", nil)
)

// refRuleKey is one series of the reference's per-rule counters.
type refRuleKey struct {
	desc               *prometheus.Desc
	domain, key1, key2 string
}

func refDesc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe describes nothing: refMetrics is an unchecked collector, since
// which of its series exist depends on the rules.
func (r *refMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect derives the reference's series from ours.
func (r *refMetrics) Collect(ch chan<- prometheus.Metric) {
	d := r.derive()
	sums := map[refRuleKey]float64{}
	var order []refRuleKey
	for _, s := range d.rules {
		// Summed by the reference's labels: the domain, and the first
		// two parts of the rule's stat path.
		k1, k2 := refKeys(s.path)
		k := refRuleKey{refRuleStats[s.ours], s.domain, k1, k2}
		if _, seen := sums[k]; !seen {
			order = append(order, k)
		}
		sums[k] += s.value
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, sums[k], k.domain, k.key1, k.key2)
	}
	if h := d.responseTime; h != nil {
		buckets := make(map[float64]uint64, len(h.GetBucket()))
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		ch <- prometheus.MustNewConstHistogram(refResponseTime, h.GetSampleCount(), h.GetSampleSum(), buckets, "ShouldRateLimit")
	}
	ch <- prometheus.MustNewConstMetric(refTotalRequests, prometheus.CounterValue, d.requests, "ShouldRateLimit")
	ch <- prometheus.MustNewConstMetric(refCallErrors, prometheus.CounterValue, d.redisErrors, "redis_error")
	ch <- prometheus.MustNewConstMetric(refCallErrors, prometheus.CounterValue, d.invalid, "service_error")
	ch <- prometheus.MustNewConstMetric(refLoadSuccess, prometheus.CounterValue, d.loadOK)
	ch <- prometheus.MustNewConstMetric(refLoadError, prometheus.CounterValue, d.loadFailed)
}

// refRuleSeries is one of our per-rule series, under the reference's
// names: the rule's stat path instead of our rule label.
type refRuleSeries struct {
	ours         string // our metric's name, a key of refRuleStats
	domain, path string
	value        float64
}

// refDerived is what the reference's stats are made of, read from ours.
type refDerived struct {
	rules                          []refRuleSeries
	requests, redisErrors, invalid float64
	loadOK, loadFailed             float64
	responseTime                   *dto.Histogram // nil before the registry has it
}

// derive reads our registry once and derives the reference's values.
func (r *refMetrics) derive() refDerived {
	fams, _ := r.ours.Gather() // what gathered still counts
	paths := r.pathsFor(r.rules())
	var d refDerived
	for _, f := range fams {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if _, ok := refRuleStats[name]; ok {
				rule := labels["rule"]
				if p, ok := paths[[2]string{labels["domain"], rule}]; ok {
					rule = p
				}
				d.rules = append(d.rules, refRuleSeries{ours: name, domain: labels["domain"], path: rule, value: m.GetCounter().GetValue()})
				continue
			}
			switch name {
			case "ratelimit_sidecar_decisions_total":
				d.requests += m.GetCounter().GetValue()
				switch labels["result"] {
				case "invalid":
					d.invalid += m.GetCounter().GetValue()
				case "error":
					d.redisErrors += m.GetCounter().GetValue()
				}
			case "ratelimit_sidecar_failure_mode_decisions_total":
				d.redisErrors += m.GetCounter().GetValue()
			case "ratelimit_sidecar_config_reloads_total":
				if labels["result"] == "success" {
					d.loadOK += m.GetCounter().GetValue()
				} else {
					d.loadFailed += m.GetCounter().GetValue()
				}
			case "ratelimit_sidecar_decision_duration_seconds":
				d.responseTime = m.GetHistogram()
			}
		}
	}
	// The reference counts its first load too; we run only if ours
	// succeeded.
	d.loadOK++
	return d
}

// refPaths maps each (domain, rule label) of our per-rule series whose
// label is a limit's name to the rule's stat path, the keys from the top
// (Rule.Name), which the reference's names use. Other labels are paths
// already.
func refPaths(rs *limits.Ruleset) map[[2]string]string {
	out := map[[2]string]string{}
	for domain, r := range rs.All() {
		for _, l := range r.Limits {
			if k := [2]string{domain, l.Name}; l.Name != "" && out[k] == "" {
				out[k] = r.Name
			}
		}
	}
	return out
}

// refIPv4 finds IPv4 addresses, whose dots the reference's stat names
// replace.
var refIPv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// refKeys cuts a rule's stat path into the reference's key1 and key2
// labels: its first two dot-separated parts, after the reference's
// sanitizing of stat names (':' and '|' become '_', and so do the dots of
// IPv4 addresses).
func refKeys(path string) (key1, key2 string) {
	path = refSanitize(path)
	key1, rest, _ := strings.Cut(path, ".")
	key2, _, _ = strings.Cut(rest, ".")
	return key1, key2
}

// Handler serves ours and, with reference, envoyproxy/ratelimit's names
// derived from it at each scrape (--reference-metrics). rules returns the
// rules in use, whose limit names map to the reference's stat paths.
func Handler(ours *prometheus.Registry, rules func() *limits.Ruleset, reference bool) http.Handler {
	if !reference {
		return promhttp.HandlerFor(ours, promhttp.HandlerOpts{})
	}
	ref := prometheus.NewRegistry()
	ref.MustRegister(&refMetrics{ours: ours, rules: rules})
	return promhttp.HandlerFor(prometheus.Gatherers{ours, ref}, promhttp.HandlerOpts{})
}
