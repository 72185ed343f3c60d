package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// examples/monitoring/monitoring_test.go, in the main module, checks that
// the metrics and labels these files use are served. Here Prometheus's own
// code checks that they load: the rule file as Prometheus (and promtool
// check rules) loads it, and every dashboard query as PromQL.
const (
	alertsFile    = "../examples/monitoring/alerts.yaml"
	dashboardFile = "../examples/monitoring/grafana-dashboard.json"
)

func TestAlertRulesLoad(t *testing.T) {
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := checkAlerts(raw)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			got = append(got, r.Alert)
		}
	}
	want := []string{
		"RateLimitSidecarConfigReloadFailed",
		"RateLimitSidecarRedisCircuitOpen",
		"RateLimitSidecarRedisConfigError",
		"RateLimitSidecarRedisCredentialsNotRenewed",
		"RateLimitSidecarXDSNoRules",
		"RateLimitSidecarXDSDisconnected",
		"RateLimitSidecarRedisErrors",
		"RateLimitSidecarDecisionLatencyHigh",
		"RateLimitSidecarCertificateExpiring",
		"RateLimitSidecarTLSReloadFailed",
		"RateLimitSidecarConnectionsReclaimed",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
}

func TestDashboardQueriesParse(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDashboard(raw); err != nil {
		t.Fatal(err)
	}
}

func TestBrokenAlertsFail(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{
			name: "misspelled field",
			old:  "    annotations:", new: "    anotations:",
			want: "field anotations not found",
		},
		{
			name: "bad PromQL",
			old:  "ratelimit_sidecar_redis_circuit_open) == 1", new: "ratelimit_sidecar_redis_circuit_open == 1",
			want: "unclosed left parenthesis",
		},
		{
			name: "bad template",
			old:  "{{ $value | humanizePercentage }}", new: "{{ $value | humanizePercent }}",
			want: `function "humanizePercent" not defined`,
		},
		{
			name: "metric without our prefix",
			old:  "(ratelimit_sidecar_redis_circuit_open)", new: "(ratelimit_sidcar_redis_circuit_open)",
			want: "ratelimit_sidcar_redis_circuit_open is not a ratelimit_sidecar_ metric",
		},
		{
			name: "alert without severity",
			old:  "          severity: critical\n", new: "          team: edge\n",
			want: `alert "RateLimitSidecarRedisCircuitOpen": no severity label`,
		},
	}
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(raw, []byte(tt.old)) {
				t.Fatalf("%s does not contain %q", alertsFile, tt.old)
			}
			_, err := checkAlerts(bytes.Replace(raw, []byte(tt.old), []byte(tt.new), 1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkAlerts: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBrokenDashboardsFail(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{
			name: "bad PromQL",
			old:  `"sum by (result) (rate(`, new: `"sum by result (rate(`,
			want: `panel "Decisions per second by result": 1:8: parse error: unexpected identifier "result" in grouping opts`,
		},
		{
			name: "metric without our prefix",
			old:  "ratelimit_sidecar_rule_hits_total", new: "ratelimit_rule_hits_total",
			want: "ratelimit_rule_hits_total is not a ratelimit_sidecar_ metric",
		},
		{
			name: "duplicate panel id",
			old:  `"id": 3,`, new: `"id": 2,`,
			want: "panel id 2 is used twice",
		},
		{
			name: "overlapping panels",
			old:  `"x": 12,`, new: `"x": 6,`,
			want: "overlap",
		},
		{
			name: "hard-wired data source of a variable",
			old:  `"uid": "${datasource}"`, new: `"uid": "prometheus-prod"`,
			want: `variable "job" uses data source "prometheus-prod", not ${datasource}`,
		},
		{
			name: "hard-wired data source of a panel",
			old: `"description": "Every ShouldRateLimit call by result: ok, over_limit (Envoy answers 429), invalid (malformed request) or error (no decision; Envoy applies failure_mode_deny).",
      "datasource": {
        "type": "prometheus",
        "uid": "${datasource}"`,
			new: `"description": "",
      "datasource": {
        "type": "prometheus",
        "uid": "prometheus-prod"`,
			want: `panel "Decisions per second by result": uses data source "prometheus-prod", not ${datasource}`,
		},
		{
			name: "hard-wired data source of a query",
			old: `"refId": "A",
          "datasource": {
            "type": "prometheus",
            "uid": "${datasource}"`,
			new: `"refId": "A",
          "datasource": {
            "type": "prometheus",
            "uid": "prometheus-prod"`,
			want: `panel "Decisions per second by result": query A uses data source "prometheus-prod", not ${datasource}`,
		},
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(raw, []byte(tt.old)) {
				t.Fatalf("%s does not contain %q", dashboardFile, tt.old)
			}
			err := checkDashboard(bytes.Replace(raw, []byte(tt.old), []byte(tt.new), 1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkDashboard: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// checkAlerts loads a rule file as Prometheus does, failing on unknown
// fields, bad PromQL and bad templates, then requires what our alerts
// promise: only our metrics, a severity, a summary and a description.
func checkAlerts(raw []byte) (*rulefmt.RuleGroups, error) {
	groups, errs := rulefmt.Parse(raw, false)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			fail := func(format string, a ...any) {
				errs = append(errs, fmt.Errorf("alert %q: "+format, append([]any{r.Alert}, a...)...))
			}
			if r.Alert == "" {
				fail("recording rules are not expected here")
				continue
			}
			if err := ourMetricsOnly(r.Expr); err != nil {
				fail("%v", err)
			}
			if r.Labels["severity"] == "" {
				fail("no severity label")
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					fail("no %s annotation", a)
				}
			}
		}
	}
	return groups, errors.Join(errs...)
}

// grafanaRange stands for Grafana's interval variables, which PromQL
// cannot parse.
var grafanaRange = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Datasource *datasource              `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct {
	UID string `json:"uid"`
}

// uid returns the data source's uid, "" if unset.
func (d *datasource) uid() string {
	if d == nil {
		return ""
	}
	return d.UID
}

// checkDashboard parses every query of a Grafana dashboard as PromQL and
// checks the layout: unique panel ids, panels inside the 24-column grid
// and not on top of each other, and the data source left to the
// ${datasource} variable, so the dashboard imports anywhere.
func checkDashboard(raw []byte) error {
	var d struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string      `json:"name"`
				Type       string      `json:"type"`
				Datasource *datasource `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		return err
	}
	var errs []error
	if d.UID == "" {
		errs = append(errs, errors.New("dashboard has no uid"))
	}
	for _, v := range d.Templating.List {
		if uid := v.Datasource.uid(); v.Type == "query" && uid != "${datasource}" {
			errs = append(errs, fmt.Errorf("variable %q uses data source %q, not ${datasource}", v.Name, uid))
		}
	}
	ids := map[int]bool{}
	for i, p := range d.Panels {
		fail := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("panel %q: "+format, append([]any{p.Title}, a...)...))
		}
		if ids[p.ID] {
			fail("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			fail("gridPos %+v is outside the 24-column grid", g)
		}
		for _, q := range d.Panels[:i] {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				fail("gridPos %+v and panel %q's %+v overlap", g, q.Title, h)
			}
		}
		if p.Type == "row" {
			continue
		}
		if uid := p.Datasource.uid(); uid != "${datasource}" {
			fail("uses data source %q, not ${datasource}", uid)
		}
		if len(p.Targets) == 0 {
			fail("no queries")
		}
		for _, tg := range p.Targets {
			if uid := tg.Datasource.uid(); uid != "${datasource}" {
				fail("query %s uses data source %q, not ${datasource}", tg.RefID, uid)
			}
			expr := grafanaRange.ReplaceAllString(tg.Expr, "5m")
			if _, err := parser.ParseExpr(expr); err != nil {
				fail("%v", err)
				continue
			}
			if err := ourMetricsOnly(expr); err != nil {
				fail("%v", err)
			}
		}
	}
	return errors.Join(errs...)
}

// ourMetricsOnly checks that every series an expression selects is one of
// the sidecar's, by name: examples/monitoring/monitoring_test.go then
// checks that each of those names is served.
func ourMetricsOnly(expr string) error {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return err
	}
	var errs []error
	n := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			n++
			if !strings.HasPrefix(vs.Name, "ratelimit_sidecar_") {
				name := vs.Name
				if name == "" {
					name = vs.String()
				}
				errs = append(errs, fmt.Errorf("%s is not a ratelimit_sidecar_ metric", name))
			}
		}
		return nil
	})
	if n == 0 {
		errs = append(errs, fmt.Errorf("%q selects no series", expr))
	}
	return errors.Join(errs...)
}
