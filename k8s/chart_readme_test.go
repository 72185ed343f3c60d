package k8s_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

const chartReadme = chartDir + "/README.md"

// TestChartReadmeSidecarMode keeps the chart README's sidecar snippet
// equal to the sidecar of k8s/deployment.yaml, which the manifest tests
// check and which explains each line.
func TestChartReadmeSidecarMode(t *testing.T) {
	readme, err := os.ReadFile(chartReadme)
	if err != nil {
		t.Fatal(err)
	}
	block, err := readmeBlock(string(readme), "## Sidecar mode")
	if err != nil {
		t.Fatal(err)
	}
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(files)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSidecarSnippet([]byte(block), objs); err != nil {
		t.Error(err)
	}
}

// checkSidecarSnippet decodes the snippet strictly and compares it with
// the sidecar container and rules volume of k8s/'s Deployment.
func checkSidecarSnippet(block []byte, objs []object) error {
	var snippet struct {
		InitContainers []corev1.Container `json:"initContainers"`
		Volumes        []corev1.Volume    `json:"volumes"`
	}
	if err := strictDecode(block, &snippet); err != nil {
		return fmt.Errorf("%s, sidecar mode: %w", chartReadme, err)
	}
	var want struct {
		InitContainers []corev1.Container
		Volumes        []corev1.Volume
	}
	for _, d := range index(objs).deployments {
		spec := &d.Spec.Template.Spec
		c, native := findContainer(spec, sidecarName)
		if c == nil || !native {
			continue
		}
		want.InitContainers = append(want.InitContainers, *c)
		for _, m := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == m.Name {
					want.Volumes = append(want.Volumes, v)
				}
			}
		}
	}
	if len(want.InitContainers) == 0 {
		return errors.New("k8s/: no Deployment with the sidecar")
	}
	if diff := cmp.Diff(want.InitContainers, snippet.InitContainers); diff != "" {
		return fmt.Errorf("%s, sidecar mode: initContainers differ from k8s/deployment.yaml's (-k8s +README):\n%s", chartReadme, diff)
	}
	if diff := cmp.Diff(want.Volumes, snippet.Volumes); diff != "" {
		return fmt.Errorf("%s, sidecar mode: volumes differ from k8s/deployment.yaml's (-k8s +README):\n%s", chartReadme, diff)
	}
	return nil
}

func TestChartReadmeSidecarModeDrift(t *testing.T) {
	readme, err := os.ReadFile(chartReadme)
	if err != nil {
		t.Fatal(err)
	}
	block, err := readmeBlock(string(readme), "## Sidecar mode")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{name: "another flag", old: "--memory-limit=100MiB", new: "--memory-limit=128MiB", want: "initContainers differ"},
		{name: "misspelt field", old: "readOnly: true", new: "readonly: true", want: `unknown field "initContainers[0].volumeMounts[0].readonly"`},
		{name: "another ConfigMap", old: "name: edge-proxy-ratelimit-rules", new: "name: rules", want: "volumes differ"},
	}
	files, err := manifestFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(block, tt.old) {
				t.Fatalf("the snippet does not contain %q", tt.old)
			}
			err := checkSidecarSnippet([]byte(strings.Replace(block, tt.old, tt.new, 1)), objs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestChartReadmeListsEveryValue requires every value of values.yaml in
// the README's values table, as `path`.
func TestChartReadmeListsEveryValue(t *testing.T) {
	readme, err := os.ReadFile(chartReadme)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal("README has no ## Values section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	vals := readValues(t, "values.yaml")
	for _, p := range valuePaths("", vals) {
		if !strings.Contains(table, "`"+p+"`") {
			t.Errorf("value %s is not in the README's values table", p)
		}
	}
}

// freeForm are values whose keys are the user's or Kubernetes's, not the
// chart's: the table names the value, not each field.
var freeForm = []string{
	"rules.files", "resources", "podSecurityContext", "securityContext",
	"probes.startup", "probes.readiness", "probes.liveness",
	"metrics.grafanaDashboard.labels",
}

// valuePaths lists the dotted paths of a values tree's leaves: scalars,
// lists, empty maps and free-form maps.
func valuePaths(prefix string, v map[string]any) []string {
	var out []string
	for _, k := range sortedKeys(v) {
		p := strings.TrimPrefix(prefix+"."+k, ".")
		if m, ok := v[k].(map[string]any); ok && len(m) > 0 && !slices.Contains(freeForm, p) {
			out = append(out, valuePaths(p, m)...)
			continue
		}
		out = append(out, p)
	}
	return out
}
