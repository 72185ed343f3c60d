package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// RefStat is one of envoyproxy/ratelimit's statsd stats, derived from
// our metrics: a counter's running total since start, or a timer.
type RefStat struct {
	// Name is the reference's stat name, dotted and without tags:
	// ratelimit.service.rate_limit.<domain>.<stat path>.total_hits.
	Name string
	// Value is a counter's total since start; a sink sends what it grew
	// by since its last flush, as the reference's statsd client does.
	Value float64
	// Timer, if not nil, makes the stat a timer: the histogram of our
	// observations, in seconds, whose new ones the sink sends.
	Timer *dto.Histogram
}

// Reference derives envoyproxy/ratelimit's statsd stats from our
// registry at each call (Stats): the decisions pay nothing for it. It is
// safe for concurrent use.
type Reference struct{ r *refMetrics }

// NewReference returns a Reference that reads ours; rules returns the
// rules in use, whose limit names map to the reference's stat paths.
func NewReference(ours prometheus.Gatherer, rules func() *limits.Ruleset) *Reference {
	return &Reference{r: &refMetrics{ours: ours, rules: rules}}
}

// refStatSuffix is the last part of the reference's name of each of our
// per-rule counters (its stats Manager's NewStats).
var refStatSuffix = map[string]string{
	"ratelimit_sidecar_rule_hits_total":         "total_hits",
	"ratelimit_sidecar_rule_within_limit_total": "within_limit",
	"ratelimit_sidecar_rule_near_limit_total":   "near_limit",
	"ratelimit_sidecar_rule_over_limit_total":   "over_limit",
	"ratelimit_sidecar_rule_shadow_mode_total":  "shadow_mode",
}

// Stats returns the reference's stats, in a stable order: per-rule ones
// first, in the registry's order, each name once (our series of one rule
// path, across algorithms and windows, are summed).
func (r *Reference) Stats() []RefStat {
	d := r.r.derive()
	var out []RefStat
	index := map[string]int{}
	for _, s := range d.rules {
		name := "ratelimit.service.rate_limit." + refSanitize(s.domain+"."+s.path) + "." + refStatSuffix[s.ours]
		if i, ok := index[name]; ok {
			out[i].Value += s.value
			continue
		}
		index[name] = len(out)
		out = append(out, RefStat{Name: name, Value: s.value})
	}
	out = append(out,
		RefStat{Name: "ratelimit.service.call.should_rate_limit.redis_error", Value: d.redisErrors},
		RefStat{Name: "ratelimit.service.call.should_rate_limit.service_error", Value: d.invalid},
		RefStat{Name: "ratelimit.service.config_load_success", Value: d.loadOK},
		RefStat{Name: "ratelimit.service.config_load_error", Value: d.loadFailed},
		RefStat{Name: "ratelimit_server.ShouldRateLimit.total_requests", Value: d.requests},
	)
	if d.responseTime != nil {
		out = append(out, RefStat{Name: "ratelimit_server.ShouldRateLimit.response_time", Timer: d.responseTime})
	}
	return out
}

// refSanitize sanitizes a stat name as the reference does: ':' and '|'
// become '_', and so do the dots of IPv4 addresses.
func refSanitize(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	return refIPv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
