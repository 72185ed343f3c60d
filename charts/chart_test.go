// Package charts_test loads the rule files the Helm chart ships, in
// values.yaml and in its ci/ examples, with the sidecar's own rule parser,
// so that the chart's defaults start a sidecar. Rendering and the
// Kubernetes objects are checked in k8s/chart_test.go, whose module has
// Helm; this module does not take on Helm's dependencies.
package charts_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

const chartDir = "ratelimit-sidecar"

// ruleFiles reads rules.files of values files, merged as Helm merges
// them (a later file's key wins, null removes one): name → file, given as
// text or as a YAML object (which the chart writes out with toYaml).
func ruleFiles(paths ...string) ([]config.File, error) {
	merged := map[string]any{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var v struct {
			Rules struct {
				Files map[string]any `yaml:"files"`
			} `yaml:"rules"`
		}
		if err := yaml.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for name, body := range v.Rules.Files {
			if body == nil {
				delete(merged, name)
				continue
			}
			merged[name] = body
		}
	}
	var files []config.File
	for name, body := range merged {
		var data []byte
		switch b := body.(type) {
		case string:
			data = []byte(b)
		case map[string]any:
			var err error
			if data, err = yaml.Marshal(b); err != nil {
				return nil, fmt.Errorf("rules.files.%s: %w", name, err)
			}
		default:
			return nil, fmt.Errorf("rules.files.%s: %T, want text or an object", name, body)
		}
		files = append(files, config.File{Name: "rules.files." + name, Data: data})
	}
	slices.SortFunc(files, func(a, b config.File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// TestChartRulesLoad loads the rules each ci/ example installs: its own
// over values.yaml's. (values.yaml has none: the image's own then apply,
// config/rules.yaml, which the config tests load.)
func TestChartRulesLoad(t *testing.T) {
	defaults := filepath.Join(chartDir, "values.yaml")
	paths, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no ci/*-values.yaml")
	}
	for _, p := range append([]string{""}, paths...) {
		name := "defaults"
		if p != "" {
			name = filepath.Base(p)
		}
		t.Run(name, func(t *testing.T) {
			files, err := ruleFiles(defaults, p)
			if p == "" {
				files, err = ruleFiles(defaults)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(files) == 0 {
				t.Skip("no rules.files: the image's rules or rules.existingConfigMap")
			}
			rs, err := config.Parse(files, config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// Each file is a domain of its own (no --merge-domains).
			if got := len(rs.Domains()); got != len(files) {
				t.Errorf("%d domains from %d files", got, len(files))
			}
		})
	}
}

// TestChartRulesLoadFails shows that a broken rule file in values fails,
// and a second file of the same domain.
func TestChartRulesLoadFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "values.yaml")
	raw, err := os.ReadFile(filepath.Join(chartDir, "ci", "full-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const old, new = "unit: second", "unit: fortnight"
	if !strings.Contains(string(raw), old) {
		t.Fatalf("values.yaml does not contain %q", old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(raw), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := ruleFiles(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(files, config.Options{})
	if want := `unit: unknown unit "fortnight"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got error %v, want one containing %q", err, want)
	}

	// A values file adding a file of a domain the defaults already have.
	extra := filepath.Join(dir, "extra.yaml")
	if err := os.WriteFile(extra, []byte("rules:\n  files:\n    more.yaml: |\n      domain: edge\n      descriptors: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err = ruleFiles(filepath.Join(chartDir, "ci", "full-values.yaml"), extra)
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(files, config.Options{})
	if want := `domain "edge" is already defined in rules.files.edge.yaml`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got error %v, want one containing %q", err, want)
	}
}
