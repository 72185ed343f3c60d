package metrics_test

import (
	"runtime"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// TestBuildInfo: ratelimit_sidecar_build_info is 1, labelled with the
// version, the Go version and the commit.
func TestBuildInfo(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567"}, 0.8, metrics.DefaultMaxValues)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"version": "v0.1.0", "goversion": runtime.Version(), "revision": "0123456789abcdef0123456789abcdef01234567"}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_sidecar_build_info" {
			continue
		}
		if len(mf.Metric) != 1 {
			t.Fatalf("%d series, want 1", len(mf.Metric))
		}
		got := map[string]string{}
		for _, l := range mf.Metric[0].Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("label %s = %q, want %q", k, got[k], v)
			}
		}
		if v := mf.Metric[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("value %v, want 1", v)
		}
		return
	}
	t.Fatal("no ratelimit_sidecar_build_info")
}

// TestNewHasNoRevision: New, which takes the version alone, labels the
// revision empty.
func TestNewHasNoRevision(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ratelimit_sidecar_build_info" {
			for _, l := range mf.Metric[0].Label {
				if l.GetName() == "version" && l.GetValue() != "test" {
					t.Errorf("version %q, want test", l.GetValue())
				}
			}
			return
		}
	}
	t.Fatal("no ratelimit_sidecar_build_info")
}
