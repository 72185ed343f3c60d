package k8s_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/prometheus/model/rulefmt"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The chart is rendered, linted and checked with Helm's own packages, as
// `helm template`, `helm lint` and `helm install --dry-run` would, with no
// cluster: as release chartRelease in namespace chartNS of a cluster of
// version chartKube.
const (
	chartDir     = "../charts/ratelimit-sidecar"
	chartRelease = "rl"
	chartNS      = "edge"
	// The admin listener, which must stay on loopback.
	adminPort = 8082
)

var chartKube = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// chartKinds are the kinds the chart may render, each with its typed
// object. The Prometheus Operator's two CRDs are decoded into the fields
// the chart uses (chart_crds_test.go would need the operator's module and
// its dependencies for no more checking than this).
var chartKinds = map[string]func() metav1.Object{
	"apps/v1/Deployment":                      func() metav1.Object { return &appsv1.Deployment{} },
	"v1/Service":                              func() metav1.Object { return &corev1.Service{} },
	"v1/ConfigMap":                            func() metav1.Object { return &corev1.ConfigMap{} },
	"v1/ServiceAccount":                       func() metav1.Object { return &corev1.ServiceAccount{} },
	"policy/v1/PodDisruptionBudget":           func() metav1.Object { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() metav1.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() metav1.Object { return &networkingv1.NetworkPolicy{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() metav1.Object { return &serviceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() metav1.Object { return &prometheusRule{} },
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart renders; any other field fails the strict decode.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule is the Prometheus Operator's PrometheusRule; its groups
// are checked by Prometheus's own rule loader (checkAlerts).
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []map[string]any `json:"groups"`
	} `json:"spec"`
}

// rendered is one rendering of the chart.
type rendered struct {
	files  map[string]string // template → output
	objs   []object
	values chartutil.Values // .Values, after Helm merged them
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// readValues reads a values file of the chart, such as ci/full-values.yaml.
func readValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// renderChart renders ch with user values as `helm install` does: Helm
// merges them over values.yaml, checks the result against
// values.schema.json, and renders every template (strictly: a template
// reading a value that does not exist fails). Then every manifest is
// decoded strictly into its type.
func renderChart(ch *chart.Chart, vals map[string]any) (*rendered, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartKube
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: chartRelease, Namespace: chartNS, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, err
	}
	r := &rendered{files: files, values: top["Values"].(chartutil.Values)}
	var errs []error
	for _, name := range sortedKeys(files) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt
		}
		objs, err := decodeChartDocs(strings.TrimPrefix(name, ch.Name()+"/"), []byte(files[name]))
		if err != nil {
			errs = append(errs, err)
		}
		r.objs = append(r.objs, objs...)
	}
	return r, errors.Join(errs...)
}

// decodeChartDocs is decodeManifests for the chart's kinds.
func decodeChartDocs(source string, data []byte) ([]object, error) {
	var out []object
	rd := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		where := fmt.Sprintf("%s#%d", source, i)
		var any map[string]any
		if err := yaml.Unmarshal(doc, &any); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if len(any) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		newObj, ok := chartKinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: kind %q of %q is not one this test knows; add it to chartKinds", where, tm.Kind, tm.APIVersion)
		}
		obj := newObj()
		if err := strictDecode(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		if obj.GetName() == "" {
			return nil, fmt.Errorf("%s: %s without metadata.name", where, tm.Kind)
		}
		out = append(out, object{source: where, kind: tm.Kind, obj: obj})
	}
}

// names lists the rendered objects as Kind/name.
func (r *rendered) names() []string {
	var out []string
	for _, o := range r.objs {
		out = append(out, o.kind+"/"+o.obj.GetName())
	}
	slices.Sort(out)
	return out
}

// value reads a merged value by its dotted path; nil if it is not set.
func (r *rendered) value(p string) any {
	var v any = map[string]any(r.values)
	for _, k := range strings.Split(p, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (r *rendered) str(p string) string {
	s, _ := r.value(p).(string)
	return s
}

// The renderings the tests check: the defaults, and each file in ci/,
// which between them turn every optional object and setting on.
var chartCases = []struct {
	name   string
	values string // in the chart; "" for the defaults
	want   []string
}{
	{
		name: "defaults",
		want: []string{
			"Deployment/rl-ratelimit-sidecar",
			"PodDisruptionBudget/rl-ratelimit-sidecar",
			"Service/rl-ratelimit-sidecar",
			"ServiceAccount/rl-ratelimit-sidecar",
		},
	},
	{
		name:   "full",
		values: "ci/full-values.yaml",
		want: []string{
			"ConfigMap/ratelimit-dashboard",
			"ConfigMap/ratelimit-rules",
			"Deployment/ratelimit",
			"HorizontalPodAutoscaler/ratelimit",
			"NetworkPolicy/ratelimit",
			"PodDisruptionBudget/ratelimit",
			"PrometheusRule/ratelimit",
			"Service/ratelimit",
			"ServiceAccount/ratelimit-sa",
			"ServiceMonitor/ratelimit",
		},
	},
	{
		name:   "cluster",
		values: "ci/cluster-values.yaml",
		want: []string{
			"Deployment/rl-ratelimit-sidecar",
			"NetworkPolicy/rl-ratelimit-sidecar",
			"Service/rl-ratelimit-sidecar",
		},
	},
}

func TestChartRenders(t *testing.T) {
	ch := loadChart(t)
	for _, tt := range chartCases {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if tt.values != "" {
				vals = readValues(t, tt.values)
			}
			r, err := renderChart(ch, vals)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.names()); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if err := checkChart(t, r); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChartCasesCoverCI keeps chartCases in step with ci/: chart-testing
// (ct lint, ct install) renders every file there too.
func TestChartCasesCoverCI(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, f := range files {
		got = append(got, "ci/"+filepath.Base(f))
	}
	for _, tt := range chartCases {
		if tt.values != "" {
			want = append(want, tt.values)
		}
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ci/ files (-in chartCases +on disk):\n%s", diff)
	}
}

func TestChartLint(t *testing.T) {
	for _, tt := range chartCases {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if tt.values != "" {
				vals = readValues(t, tt.values)
			}
			kv := chartKube
			l := lint.AllWithKubeVersion(chartDir, vals, chartNS, &kv)
			for _, m := range l.Messages {
				// INFO is only "icon is recommended".
				if m.Severity > support.InfoSev {
					t.Error(m)
				}
			}
		})
	}
}

func TestChartKubeVersion(t *testing.T) {
	ch := loadChart(t)
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, chartKube.Version) {
		t.Errorf("Chart.yaml kubeVersion %q excludes %s, the version the tests render for", ch.Metadata.KubeVersion, chartKube.Version)
	}
	// Native sidecars are not needed here, but the API versions are.
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, "v1.25.0") {
		t.Errorf("Chart.yaml kubeVersion %q excludes 1.25", ch.Metadata.KubeVersion)
	}
}

// TestChartPackages packs the chart as `helm package` does and renders
// the archive: .helmignore must keep what the templates read (files/).
func TestChartPackages(t *testing.T) {
	ch := loadChart(t)
	archive, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	packed, err := loader.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	vals := readValues(t, "ci/full-values.yaml")
	want, err := renderChart(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	got, err := renderChart(packed, vals)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.files, got.files); diff != "" {
		t.Errorf("%s renders differently (-directory +archive):\n%s", filepath.Base(archive), diff)
	}
}

// TestChartMonitoringCopies keeps the chart's copies of the alerts and the
// dashboard equal to examples/monitoring/, where the other tests check
// them; `helm package` cannot reach files outside the chart.
func TestChartMonitoringCopies(t *testing.T) {
	for _, f := range []struct{ copy, orig string }{
		{"files/alerts.yaml", alertsFile},
		{"files/grafana-dashboard.json", dashboardFile},
	} {
		got, err := os.ReadFile(filepath.Join(chartDir, f.copy))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(f.orig)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: cp %s charts/ratelimit-sidecar/%s", f.copy, f.orig, strings.TrimPrefix(f.orig, "../"), f.copy)
		}
	}
}

// TestChartPrometheusRule renders every alert of alerts.yaml, less the
// disabled ones, with the extra labels, and loads them as Prometheus does.
func TestChartPrometheusRule(t *testing.T) {
	ch := loadChart(t)
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	file, err := checkAlerts(raw)
	if err != nil {
		t.Fatal(err)
	}
	r, err := renderChart(ch, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{
		"enabled":    true,
		"ruleLabels": map[string]any{"team": "edge", "severity": "page"},
		"disabled":   []any{"RateLimitSidecarRedisErrors"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var pr *prometheusRule
	for _, o := range r.objs {
		if v, ok := o.obj.(*prometheusRule); ok {
			pr = v
		}
	}
	if pr == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	groups, err := ruleGroups(pr)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, g := range file.Groups {
		for _, rl := range g.Rules {
			if rl.Alert != "RateLimitSidecarRedisErrors" {
				want = append(want, rl.Alert+" severity="+rl.Labels["severity"]+" team=edge "+rl.Expr)
			}
		}
	}
	for _, g := range groups.Groups {
		for _, rl := range g.Rules {
			got = append(got, rl.Alert+" severity="+rl.Labels["severity"]+" team="+rl.Labels["team"]+" "+rl.Expr)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
}

// ruleGroups loads a PrometheusRule's groups with Prometheus's rule loader.
func ruleGroups(pr *prometheusRule) (*rulefmt.RuleGroups, error) {
	y, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		return nil, err
	}
	return checkAlerts(y)
}

// TestChartRulesChecksum checks the annotation that rolls the pods when
// the rules change, and only then.
func TestChartRulesChecksum(t *testing.T) {
	ch := loadChart(t)
	const a = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	const b = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
	// with returns values with rules.files {rules.yaml: body} and more.
	with := func(body string, more map[string]any) map[string]any {
		v := map[string]any{"rules": map[string]any{"files": map[string]any{"rules.yaml": body}}}
		for k, x := range more {
			if k == "rules" {
				for rk, rx := range x.(map[string]any) {
					v["rules"].(map[string]any)[rk] = rx
				}
				continue
			}
			v[k] = x
		}
		return v
	}
	checksum := func(t *testing.T, vals map[string]any) (string, bool) {
		t.Helper()
		r, err := renderChart(ch, vals)
		if err != nil {
			t.Fatal(err)
		}
		d := index(r.objs).deployments[0]
		sum, ok := d.Spec.Template.Annotations["checksum/rules"]
		if ok && !regexp.MustCompile("^[0-9a-f]{64}$").MatchString(sum) {
			t.Errorf("checksum/rules %q is not a sha256", sum)
		}
		return sum, ok
	}
	sumA, ok := checksum(t, with(a, nil))
	if !ok {
		t.Fatal("no checksum/rules annotation with rules.files")
	}
	if sumB, _ := checksum(t, with(b, nil)); sumA == sumB {
		t.Errorf("checksum/rules did not change with the rules: %s", sumA)
	}
	others := map[string]map[string]any{
		"replicaCount": {"replicaCount": 5},
		// The ConfigMap's labels carry the image's version: a new image
		// must not roll the pods a second time for the rules.
		"image.tag": {"image": map[string]any{"tag": "v2"}},
		"logLevel":  {"logLevel": "debug"},
	}
	for name, more := range others {
		if sum, _ := checksum(t, with(a, more)); sum != sumA {
			t.Errorf("checksum/rules changed with %s alone: %s, want %s", name, sum, sumA)
		}
	}
	if _, ok := checksum(t, with(a, map[string]any{"rules": map[string]any{"rollOnChange": false}})); ok {
		t.Error("checksum/rules set with rules.rollOnChange false")
	}
	if _, ok := checksum(t, with(a, map[string]any{"rules": map[string]any{"existingConfigMap": "mine"}})); ok {
		t.Error("checksum/rules set with rules.existingConfigMap, whose contents the chart cannot see")
	}
	if _, ok := checksum(t, nil); ok {
		t.Error("checksum/rules set with the image's rules")
	}
}

// TestChartExistingConfigMap mounts a ConfigMap the chart does not render.
func TestChartExistingConfigMap(t *testing.T) {
	r, err := renderChart(loadChart(t), map[string]any{"rules": map[string]any{"existingConfigMap": "edge-rules"}})
	if err != nil {
		t.Fatal(err)
	}
	b := index(r.objs)
	if len(b.configMaps) != 0 {
		t.Errorf("ConfigMaps rendered beside rules.existingConfigMap: %v", sortedKeys(b.configMaps))
	}
	var got string
	for _, v := range b.deployments[0].Spec.Template.Spec.Volumes {
		if v.Name == "rules" && v.ConfigMap != nil {
			got = v.ConfigMap.Name
		}
	}
	if got != "edge-rules" {
		t.Errorf("rules volume mounts ConfigMap %q, want edge-rules", got)
	}
}

// TestChartMemoryLimit checks --memory-limit against the container's.
func TestChartMemoryLimit(t *testing.T) {
	tests := []struct {
		give map[string]any
		want string
	}{
		{give: nil, want: "192MiB"},
		{give: map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}}, want: "768MiB"},
		{give: map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "100Mi"}}}, want: "75MiB"},
		{give: map[string]any{"memoryLimit": "300MiB"}, want: "300MiB"},
		{give: map[string]any{"resources": map[string]any{"limits": nil}}, want: "0"},
	}
	ch := loadChart(t)
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			r, err := renderChart(ch, tt.give)
			if err != nil {
				t.Fatal(err)
			}
			args, err := parseArgs(sidecarFlags(t), index(r.objs).deployments[0].Spec.Template.Spec.Containers[0].Args)
			if err != nil {
				t.Fatal(err)
			}
			if got := args["memory-limit"]; got != tt.want {
				t.Errorf("--memory-limit=%s, want %s", got, tt.want)
			}
		})
	}
}

// TestChartHandshakeRate: grpc.tls.handshakeRate reaches
// --grpc-tls-handshake-rate when gRPC is served over TLS.
func TestChartHandshakeRate(t *testing.T) {
	ch := loadChart(t)
	for _, want := range []string{"500", "0", "1200"} {
		t.Run(want, func(t *testing.T) {
			tls := map[string]any{"enabled": true, "secretName": "grpc-tls"}
			if want != "500" {
				n, _ := strconv.Atoi(want)
				tls["handshakeRate"] = n
			}
			r, err := renderChart(ch, map[string]any{"grpc": map[string]any{"tls": tls}})
			if err != nil {
				t.Fatal(err)
			}
			args, err := parseArgs(sidecarFlags(t), index(r.objs).deployments[0].Spec.Template.Spec.Containers[0].Args)
			if err != nil {
				t.Fatal(err)
			}
			if got := args["grpc-tls-handshake-rate"]; got != want {
				t.Errorf("--grpc-tls-handshake-rate=%q, want %q", got, want)
			}
		})
	}
}

// TestChartRefusesBadValues: values.schema.json catches misspelt keys,
// wrong types and values outside an enum; the templates catch the
// combinations the schema cannot express. Either way the install fails
// with the value's path.
func TestChartRefusesBadValues(t *testing.T) {
	tests := []struct {
		name string
		give string // a values file
		want string
	}{
		{
			name: "misspelt top-level key",
			give: "replicaCont: 3",
			want: "additional properties 'replicaCont' not allowed",
		},
		{
			name: "misspelt nested key",
			give: "redis:\n  urll: redis://r:6379",
			want: "additional properties 'urll' not allowed",
		},
		{
			name: "failure mode outside the enum",
			give: "failureMode:\n  mode: opne",
			want: "at '/failureMode/mode': value must be one of 'open', 'closed', 'local', 'error'",
		},
		{
			name: "Redis mode outside the enum",
			give: "redis:\n  mode: sentinal",
			want: "at '/redis/mode': value must be one of 'standalone', 'sentinel', 'cluster'",
		},
		{
			name: "port as a string",
			give: "grpc:\n  port: \"8081\"",
			want: "at '/grpc/port': got string, want integer",
		},
		{
			name: "rule file not .yaml",
			give: "rules:\n  files:\n    rules.json: '{}'",
			want: "invalid propertyName 'rules.json'",
		},
		{
			name: "Redis URL of another scheme",
			give: "redis:\n  url: http://redis:6379",
			want: "at '/redis/url'",
		},
		{
			name: "flag without dashes",
			give: "extraArgs: [log-level=debug]",
			want: "at '/extraArgs/0'",
		},
		{
			name: "password in the Redis URL",
			give: "redis:\n  url: redis://:hunter2@redis:6379/0",
			want: "redis.url: holds a password",
		},
		{
			name: "Sentinel without sentinels",
			give: "redis:\n  mode: sentinel\n  sentinel:\n    masterName: mymaster",
			want: "redis.sentinel.addrs: required with redis.mode sentinel",
		},
		{
			name: "Cluster without seeds",
			give: "redis:\n  mode: cluster",
			want: "redis.cluster.addrs: required with redis.mode cluster",
		},
		{
			name: "standalone without a URL",
			give: "redis:\n  url: \"\"",
			want: "redis.url: required with redis.mode standalone",
		},
		{
			name: "Redis TLS files with TLS off",
			give: "redis:\n  tls:\n    existingSecret: redis-ca\n    caKey: ca.crt",
			want: "redis.tls.existingSecret: needs redis.tls.enabled",
		},
		{
			name: "Redis client certificate without key",
			give: "redis:\n  tls:\n    enabled: true\n    existingSecret: redis-tls\n    certKey: tls.crt",
			want: "redis.tls.certKey and redis.tls.keyKey: set both or neither",
		},
		{
			name: "gRPC TLS without a Secret",
			give: "grpc:\n  tls:\n    enabled: true",
			want: "grpc.tls.secretName: required with grpc.tls.enabled",
		},
		{
			name: "client SAN without client CA",
			give: "grpc:\n  tls:\n    enabled: true\n    secretName: s\n    clientSAN: envoy",
			want: "grpc.tls.clientSAN: needs grpc.tls.clientCA.enabled",
		},
		{
			name: "gRPC on the admin port",
			give: "grpc:\n  port: 8082",
			want: "grpc.port: 8082 is the admin listener's",
		},
		{
			name: "memory limit in another unit",
			give: "resources:\n  limits:\n    memory: 268435456",
			want: "memoryLimit: cannot derive",
		},
		{
			name: "autoscaler range upside down",
			give: "autoscaling:\n  enabled: true\n  minReplicas: 5\n  maxReplicas: 2",
			want: "autoscaling.minReplicas: above autoscaling.maxReplicas",
		},
	}
	ch := loadChart(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			_, err = renderChart(ch, vals)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestChartBrokenTemplatesFail breaks one template at a time, as a
// careless edit would, and requires the checks to notice.
func TestChartBrokenTemplatesFail(t *testing.T) {
	tests := []struct {
		name      string
		file      string // under templates/
		old, new  string
		values    string // ci/ file to render with; "" for the defaults
		want      string
		wantCheck bool // the render succeeds and checkChart fails
	}{
		{
			name: "misspelt field", file: "deployment.yaml",
			old: "revisionHistoryLimit:", new: "revisionHistoryLimt:",
			want: `unknown field "spec.revisionHistoryLimt"`,
		},
		{
			name: "unknown flag", file: "deployment.yaml",
			old: "--log-format=", new: "--log-formt=",
			want: "unknown flag --log-formt", wantCheck: true,
		},
		{
			name: "gRPC on loopback", file: "deployment.yaml",
			old: "--grpc-addr=0.0.0.0:", new: "--grpc-addr=127.0.0.1:",
			want: "is loopback: Envoys in other pods cannot reach it", wantCheck: true,
		},
		{
			name: "HTTP on loopback", file: "deployment.yaml",
			old: "--http-addr=0.0.0.0:", new: "--http-addr=127.0.0.1:",
			want: "is loopback: the kubelet's probes cannot reach it", wantCheck: true,
		},
		{
			name: "admin on the pod address", file: "deployment.yaml",
			old: "--admin-addr=127.0.0.1:8082", new: "--admin-addr=0.0.0.0:8082",
			want: "--admin-addr=0.0.0.0:8082 must be loopback", wantCheck: true,
		},
		{
			name: "admin listener left to --http-addr", file: "deployment.yaml",
			old: "            - --admin-addr=127.0.0.1:8082\n", new: "",
			want: "set --admin-addr to loopback", wantCheck: true,
		},
		{
			name: "gRPC port not the container's", file: "deployment.yaml",
			old: `{{ print "--grpc-addr=0.0.0.0:" .Values.grpc.port | quote }}`, new: "--grpc-addr=0.0.0.0:9999",
			want: "--grpc-addr listens on 9999, but container port grpc is 8081", wantCheck: true,
		},
		{
			name: "readiness on /healthz", file: "deployment.yaml",
			old: "          readinessProbe:\n            httpGet:\n              path: /readyz", new: "          readinessProbe:\n            httpGet:\n              path: /healthz",
			want: "readinessProbe: path /healthz, want /readyz", wantCheck: true,
		},
		{
			name: "probe on the gRPC port", file: "deployment.yaml",
			old: "              path: /healthz\n              port: http", new: "              path: /healthz\n              port: grpc",
			want: "livenessProbe probes port 8081, but --http-addr listens on 8080", wantCheck: true,
		},
		{
			name: "rules mounted elsewhere", file: "deployment.yaml",
			old: "mountPath: /etc/ratelimit-sidecar\n", new: "mountPath: /etc/rules\n",
			values: "ci/full-values.yaml",
			want:   "--config=/etc/ratelimit-sidecar/: /etc/ratelimit-sidecar is not in a mount", wantCheck: true,
		},
		{
			name: "rules mounted with subPath", file: "deployment.yaml",
			old: "mountPath: /etc/ratelimit-sidecar\n", new: "mountPath: /etc/ratelimit-sidecar/rules.yaml\n              subPath: rules.yaml\n",
			values: "ci/full-values.yaml",
			want:   `mounts ConfigMap volume "rules" with subPath`, wantCheck: true,
		},
		{
			name: "rules volume of another ConfigMap", file: "deployment.yaml",
			old: `name: {{ include "ratelimit-sidecar.rulesConfigMap" . }}`, new: "name: rules",
			values: "ci/full-values.yaml",
			want:   `volume "rules": ConfigMap "rules" is neither rendered nor rules.existingConfigMap`, wantCheck: true,
		},
		{
			name: "password file from another key", file: "deployment.yaml",
			old: `{{ print "--redis-password-file=/etc/ratelimit-sidecar-redis-auth/" $redis.auth.passwordKey | quote }}`, new: "--redis-password-file=/etc/ratelimit-sidecar-redis-auth/password",
			values: "ci/full-values.yaml",
			want:   `--redis-password-file: key "password" of Secret "redis-auth", want "redis-password"`, wantCheck: true,
		},
		{
			name: "password not passed", file: "deployment.yaml",
			old: `- {{ print "--redis-password-file=/etc/ratelimit-sidecar-redis-auth/" $redis.auth.passwordKey | quote }}`, new: "- --log-level=info",
			values: "ci/full-values.yaml",
			want:   `--redis-password-file set: false, but redis.auth.existingSecret is "redis-auth"`, wantCheck: true,
		},
		{
			name: "password mounted with subPath", file: "deployment.yaml",
			old: "              mountPath: /etc/ratelimit-sidecar-redis-auth\n", new: "              mountPath: /etc/ratelimit-sidecar-redis-auth\n              subPath: redis-password\n",
			values: "ci/full-values.yaml",
			want:   `mounts Secret volume "redis-auth" with subPath`, wantCheck: true,
		},
		{
			name: "gRPC certificate outside its mount", file: "deployment.yaml",
			old: "--grpc-tls-cert=/etc/ratelimit-sidecar-tls/grpc/tls.crt", new: "--grpc-tls-cert=/etc/tls/tls.crt",
			values: "ci/full-values.yaml",
			want:   "--grpc-tls-cert=/etc/tls/tls.crt: /etc/tls/tls.crt is not in a mount", wantCheck: true,
		},
		{
			name: "client CA in the wrong Secret", file: "deployment.yaml",
			old: "--grpc-tls-client-ca=/etc/ratelimit-sidecar-tls/grpc-client-ca/", new: "--grpc-tls-client-ca=/etc/ratelimit-sidecar-tls/grpc/",
			values: "ci/full-values.yaml",
			want:   `--grpc-tls-client-ca: from Secret "ratelimit-grpc-tls", want "envoy-client-ca"`, wantCheck: true,
		},
		{
			name: "divisor not the replicas", file: "deployment.yaml",
			old: `(include "ratelimit-sidecar.divisor" .)`, new: `"1"`,
			want: "--local-fallback-divisor=1, but 2 replicas", wantCheck: true,
		},
		{
			name: "replicas beside an autoscaler", file: "deployment.yaml",
			old: "{{- if not .Values.autoscaling.enabled }}\n  replicas:", new: "{{- if true }}\n  replicas:",
			values: "ci/full-values.yaml",
			want:   "sets spec.replicas, which the HorizontalPodAutoscaler owns", wantCheck: true,
		},
		{
			name: "writable root filesystem", file: "deployment.yaml",
			old: "          {{- with .Values.securityContext }}\n          securityContext:\n            {{- toYaml . | nindent 12 }}\n          {{- end }}\n", new: "",
			want: "securityContext.readOnlyRootFilesystem must be true", wantCheck: true,
		},
		{
			name: "service account token mounted", file: "deployment.yaml",
			old: "automountServiceAccountToken: false", new: "automountServiceAccountToken: true",
			want: "automountServiceAccountToken must be false", wantCheck: true,
		},
		{
			name: "Service to a missing port", file: "service.yaml",
			old: "targetPort: grpc", new: "targetPort: rls",
			want: `Service "rl-ratelimit-sidecar": port "grpc": no container port named "rls"`, wantCheck: true,
		},
		{
			name: "Service selecting nothing", file: "service.yaml",
			old: "  selector:\n    {{- include", new: "  selector:\n    app: x\n    {{- include",
			want: `Service "rl-ratelimit-sidecar": selects no Deployment's pods`, wantCheck: true,
		},
		{
			name: "PDB selecting nothing", file: "poddisruptionbudget.yaml",
			old: "    matchLabels:\n", new: "    matchLabels:\n      app: x\n",
			want: `PodDisruptionBudget "rl-ratelimit-sidecar": selects no Deployment's pods`, wantCheck: true,
		},
		{
			name: "autoscaler of another Deployment", file: "horizontalpodautoscaler.yaml",
			old: "    kind: Deployment\n    name: {{", new: "    kind: Deployment\n    name: x{{",
			values: "ci/full-values.yaml",
			want:   `HorizontalPodAutoscaler "ratelimit": scales Deployment "xratelimit", which is not rendered`, wantCheck: true,
		},
		{
			name: "ServiceMonitor on a missing port", file: "servicemonitor.yaml",
			old: "- port: http", new: "- port: metrics",
			values: "ci/full-values.yaml",
			want:   `ServiceMonitor "ratelimit": endpoint port "metrics" is not a port of Service "ratelimit"`, wantCheck: true,
		},
		{
			name: "ServiceMonitor of another namespace", file: "servicemonitor.yaml",
			old: "      - {{ .Release.Namespace }}", new: "      - default",
			values: "ci/full-values.yaml",
			want:   `ServiceMonitor "ratelimit": namespaceSelector does not include "edge"`, wantCheck: true,
		},
		{
			name: "NetworkPolicy opening the admin port", file: "networkpolicy.yaml",
			old: "        - port: http\n", new: "        - port: 8082\n",
			values: "ci/full-values.yaml",
			want:   `NetworkPolicy "ratelimit": ingress[1].ports[0]: no container port 8082`, wantCheck: true,
		},
		{
			name: "NetworkPolicy closing the gRPC port", file: "networkpolicy.yaml",
			old: "        - port: grpc\n", new: "        - port: http\n",
			values: "ci/full-values.yaml",
			want:   `NetworkPolicy "ratelimit": no ingress rule admits the gRPC port`, wantCheck: true,
		},
		{
			name: "object without the release's namespace", file: "service.yaml",
			old: "  namespace: {{ .Release.Namespace }}\n", new: "",
			want: `Service "rl-ratelimit-sidecar": namespace "", want "edge"`, wantCheck: true,
		},
		{
			name: "value that does not exist", file: "deployment.yaml",
			old: ".Values.grpc.maxConns", new: ".Values.grpc.maxConn",
			want: `map has no entry for key "maxConn"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := loadChart(t)
			name := "templates/" + tt.file
			i := slices.IndexFunc(ch.Templates, func(f *chart.File) bool { return f.Name == name })
			if i < 0 {
				t.Fatalf("no template %s", name)
			}
			if !bytes.Contains(ch.Templates[i].Data, []byte(tt.old)) {
				t.Fatalf("%s does not contain %q", name, tt.old)
			}
			ch.Templates[i].Data = bytes.Replace(ch.Templates[i].Data, []byte(tt.old), []byte(tt.new), 1)
			var vals map[string]any
			if tt.values != "" {
				vals = readValues(t, tt.values)
			}
			r, err := renderChart(ch, vals)
			if tt.wantCheck {
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				err = checkChart(t, r)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
