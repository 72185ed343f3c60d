// Package monitoring_test checks that the Grafana dashboard and the alert
// rules only use metrics, and labels, that the sidecar's /metrics really
// serves. A renamed metric otherwise leaves an empty panel and an alert
// that can never fire, and nothing says so.
//
// k8s/monitoring_test.go (its own module, for Prometheus's parser) checks
// that the expressions parse and that the alert file loads as Prometheus
// loads it.
package monitoring_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// targetLabels are added by Prometheus when it scrapes (job, instance) or
// by Kubernetes service discovery relabelling (namespace, pod), so a
// query may use them on any series.
var targetLabels = []string{"job", "instance", "namespace", "pod"}

var metricName = regexp.MustCompile(`ratelimit_sidecar_[a-zA-Z0-9_]*`)

func TestDashboardAndAlertsUseServedMetrics(t *testing.T) {
	served, families := scrape(t)
	for _, file := range []string{"grafana-dashboard.json", "alerts.yaml"} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// Anywhere in the file, descriptions included: every name
			// with our prefix must be a series or a family we serve.
			for _, name := range metricName.FindAllString(string(raw), -1) {
				if _, ok := served[name]; !ok && !families[name] {
					t.Errorf("%s: %s is not served by /metrics", file, name)
				}
			}
			exprs, err := expressions(file, raw)
			if err != nil {
				t.Fatal(err)
			}
			if len(exprs) == 0 {
				t.Fatalf("%s: no expressions found", file)
			}
			for _, e := range exprs {
				if err := checkLabels(e, served); err != nil {
					t.Errorf("%s: %v", file, err)
				}
			}
		})
	}
}

// TestLabelCheckCatchesMistakes shows checkLabels rejects what it is for.
func TestLabelCheckCatchesMistakes(t *testing.T) {
	served, _ := scrape(t)
	tests := []struct {
		give string
		want string
	}{
		{
			give: `sum(rate(ratelimit_sidecar_decisions_total{outcome="ok"}[5m]))`,
			want: `ratelimit_sidecar_decisions_total has no label "outcome"`,
		},
		{
			give: `sum by (rule) (rate(ratelimit_sidecar_decisions_total[5m]))`,
			want: `by (rule): ratelimit_sidecar_decisions_total has no label "rule"`,
		},
		{
			give: `ratelimit_sidecar_decision_seconds_bucket`,
			want: "ratelimit_sidecar_decision_seconds_bucket is not served",
		},
		{
			give: `sum(rate(http_requests_total[5m]))`,
			want: "uses no ratelimit_sidecar_ metric",
		},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			err := checkLabels(tt.give, served)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkLabels: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// scrape runs traffic through an engine wired as cmd/ratelimit-sidecar
// wires it, with both stores and a failing Redis, records a breaker change
// and reloads, then reads the registry through the same /metrics handler.
// It returns every served series name with its label names, and the
// names of the metric families (a histogram's family is served as its
// _bucket, _sum and _count series).
func scrape(t *testing.T) (map[string][]string, map[string]bool) {
	t.Helper()
	rs, err := config.Load("../envoy/rules.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	ctx := context.Background()
	user := limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{
		{Entries: []limits.Entry{{Key: "generic_key", Value: "global"}}},
		{Entries: []limits.Entry{{Key: "tenant", Value: "t1"}}},
		{Entries: []limits.Entry{{Key: "tenant", Value: "t1"}, {Key: "user", Value: "alice"}}},
	}}

	// The embedded store: within the limit, near it, then over it (the
	// user's bucket holds 10).
	mem := limits.NewEngine(rs, store.Timed(memory.New(memory.Options{}), m.StoreCalls("memory")), limits.EngineOptions{Observer: m})
	var d limits.Decision
	codes := map[limits.Code]int{}
	for range 11 {
		if err := mem.Decide(ctx, &user, &d); err != nil {
			t.Fatal(err)
		}
		codes[d.Code]++
	}
	if codes[limits.OK] == 0 || codes[limits.OverLimit] == 0 {
		t.Fatalf("decisions %v, want both OK and OVER_LIMIT", codes)
	}
	// A malformed request.
	if err := mem.Decide(ctx, &limits.Request{Domain: "edge"}, &d); err == nil {
		t.Fatal("empty request decided, want an error")
	}

	// Redis down: the failure mode decides.
	down := limits.NewEngine(rs, store.Timed(failingStore{}, m.StoreCalls("redis")), limits.EngineOptions{Observer: m, FailureMode: limits.FailLocal, Local: memory.New(memory.Options{}), LocalDivisor: 2})
	if err := down.Decide(ctx, &user, &d); err != nil {
		t.Fatal(err)
	}
	if d.StoreErr == nil {
		t.Fatal("failing store decided, want the failure mode to")
	}
	m.RedisConfigErrors([]string{"auth", "acl", "tls"}, refusingRedis{})
	m.RedisCredentials(func() uint64 { return 1 }, func() uint64 { return 1 })
	m.XDS(func() metrics.XDSState { return metrics.XDSState{} }) // a server that never answered
	// A capped listener, as every listener of the sidecar is.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	m.Listeners(map[string]metrics.CappedListener{"grpc": bounds.NewListener(ln, 4)})
	m.BreakerChanged(true, limits.ErrStoreUnavailable)
	m.BreakerChanged(false, nil)
	m.Reloaded(config.ReloadStatus{Checksum: rs.Checksum, LoadedAt: time.Now()}, nil)
	m.Reloaded(config.ReloadStatus{}, errors.New("bad rules"))
	tlsm := m.TLS(&x509.Certificate{NotAfter: time.Now().Add(90 * 24 * time.Hour)})
	tlsm.Reloaded(nil, errors.New("tls.key: no such file"))
	tlsm.HandshakeFailed()

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	served, families, err := parseExposition(rec.Body.String())
	if err != nil {
		t.Fatal(err)
	}
	return served, families
}

type failingStore struct{}

// refusingRedis is a Redis that refuses the sidecar's password.
type refusingRedis struct{}

func (refusingRedis) ConfigErrorsTotal(kind string) uint64 { return map[string]uint64{"auth": 1}[kind] }
func (refusingRedis) ConfigErrorActive(kind string) bool   { return kind == "auth" }

func (failingStore) Apply(context.Context, *limits.Batch) error {
	return fmt.Errorf("dial redis: %w", limits.ErrStoreUnavailable)
}

// parseExposition reads Prometheus's text format: series name → the names
// of its labels, and the family names of the # TYPE lines.
func parseExposition(text string) (map[string][]string, map[string]bool, error) {
	out := map[string][]string{}
	families := map[string]bool{}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for line := range strings.SplitSeq(text, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(f, " ")
			families[name] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				labels = line[i:]
			}
		}
		if name == "" {
			return nil, nil, fmt.Errorf("bad exposition line %q", line)
		}
		set := out[name]
		for _, l := range label.FindAllStringSubmatch(labels, -1) {
			if !slices.Contains(set, l[1]) {
				set = append(set, l[1])
			}
		}
		sort.Strings(set)
		out[name] = set
	}
	return out, families, nil
}

// expressions returns the PromQL of a dashboard's targets and variables, or
// of a rule file's rules.
func expressions(file string, raw []byte) ([]string, error) {
	var out []string
	if strings.HasSuffix(file, ".json") {
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Type  string `json:"type"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					return nil, fmt.Errorf("%s: panel %q: target without expr", file, p.Title)
				}
				out = append(out, tg.Expr)
			}
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
				// label_values(metric, label): check the metric part.
				s, _ := q["query"].(string)
				if inner, ok := strings.CutPrefix(s, "label_values("); ok {
					metric, _, _ := strings.Cut(inner, ",")
					out = append(out, strings.TrimSpace(metric))
				}
			}
		}
		return out, nil
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" {
				return nil, fmt.Errorf("%s: rule %q without expr", file, r.Alert)
			}
			out = append(out, r.Expr)
		}
	}
	return out, nil
}

var (
	selector   = regexp.MustCompile(`(ratelimit_sidecar_[a-zA-Z0-9_:]*)(\{[^}]*\})?`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	byClause   = regexp.MustCompile(`\bby\s*\(([^)]*)\)\s*\(`)
	anyMetric  = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*_(total|seconds|bucket|count|sum|info)\b`)
	grafanaVar = regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`)
)

// checkLabels checks one expression: it uses a served metric of ours and
// no other, every label matcher names a label of its metric, and every
// label of a by () clause is on each metric aggregated there. Labels
// Prometheus adds at scrape time are on every series. This is a careful
// reading of the PromQL we write, not a parser: k8s/monitoring_test.go
// parses.
func checkLabels(expr string, served map[string][]string) error {
	var errs []error
	has := func(metric, label string) bool {
		return slices.Contains(targetLabels, label) || slices.Contains(served[metric], label)
	}
	sels := selector.FindAllStringSubmatch(expr, -1)
	if len(sels) == 0 {
		errs = append(errs, fmt.Errorf("%q uses no ratelimit_sidecar_ metric", expr))
	}
	for _, m := range anyMetric.FindAllString(expr, -1) {
		if !strings.HasPrefix(m, "ratelimit_sidecar_") {
			errs = append(errs, fmt.Errorf("%q uses %s, which is not ours", expr, m))
		}
	}
	for _, s := range sels {
		name := s[1]
		if _, ok := served[name]; !ok {
			errs = append(errs, fmt.Errorf("%s is not served by /metrics", name))
			continue
		}
		for _, mm := range matcher.FindAllStringSubmatch(grafanaVar.ReplaceAllString(s[2], "x"), -1) {
			if !has(name, mm[1]) {
				errs = append(errs, fmt.Errorf("%s has no label %q (it has %v)", name, mm[1], served[name]))
			}
		}
	}
	for _, loc := range byClause.FindAllStringSubmatchIndex(expr, -1) {
		labels := strings.Split(expr[loc[2]:loc[3]], ",")
		inner := balanced(expr[loc[1]-1:])
		for _, s := range selector.FindAllStringSubmatch(inner, -1) {
			if _, ok := served[s[1]]; !ok {
				continue // reported above
			}
			for _, l := range labels {
				if l = strings.TrimSpace(l); l != "" && !has(s[1], l) {
					errs = append(errs, fmt.Errorf("by (%s): %s has no label %q", expr[loc[2]:loc[3]], s[1], l))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// balanced returns s up to the parenthesis that closes its first one.
func balanced(s string) string {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[:i+1]
			}
		}
	}
	return s
}
