package sources_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/sources"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// ruleDir writes rule files of domains, each a rule on user, to a new
// directory, and returns it.
func ruleDir(t *testing.T, domains ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range domains {
		writeRules(t, dir, d, "domain: "+d+"\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	}
	return dir
}

func writeRules(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// files opens the rule files of dir as a source.
func files(t *testing.T, dir string) sources.Open {
	return func(target sources.Target, onApply func(config.ReloadStatus, error)) (sources.RuleSource, error) {
		rs, err := config.Load(dir, config.Options{})
		if err != nil {
			return nil, err
		}
		target.SetRules(rs)
		return config.NewReloader(dir, target, zaptest.NewLogger(t), config.ReloaderOptions{OnReload: onApply}), nil
	}
}

// applied records a Multi's OnApply calls.
type applied struct {
	mu   sync.Mutex
	errs []error
}

func (a *applied) onApply(_ config.ReloadStatus, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err)
}

// TestMultiFiles: two sources of rule files are one rule source: the
// first holds the domain both have, the second's is refused and said so
// in the status, a reload of both reports the failing one by name, and
// it is ready at once, files having their rules from the start.
func TestMultiFiles(t *testing.T) {
	e := engine()
	var a applied
	mr := sources.NewMulti(e, zap.NewNop(), a.onApply)
	empty := limits.NewRuleset(nil, nil, config.Checksum(nil))
	if _, err := mr.Add("files", empty, files(t, ruleDir(t, "edge"))); err != nil {
		t.Fatal(err)
	}
	second := ruleDir(t, "edge", "other")
	if _, err := mr.Add("more", empty, files(t, second)); err != nil {
		t.Fatal(err)
	}
	if _, err := mr.Add("more", empty, files(t, second)); err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("a source named twice: %v, want refused", err)
	}
	mr.Start()
	select {
	case <-mr.Ready():
	default:
		t.Errorf("not ready with rule files only; awaiting %q", mr.Awaiting())
	}
	if got := e.Rules().Domains(); len(got) != 2 {
		t.Errorf("domains in use %v, want edge and other", got)
	}
	st := mr.Status()
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), `rule source more: domain "edge" refused: rule source files holds it`) {
		t.Errorf("status error %v, want the refused domain", st.LastError)
	}
	if n := mr.Refused("more"); n != 1 {
		t.Errorf("more's domains refused: %d, want 1", n)
	}
	if parts := mr.Parts(); len(parts) != 2 || parts[0].Name != "files" || parts[1].Name != "more" {
		t.Errorf("parts %v, want files then more", parts)
	}

	writeRules(t, second, "other", "domain: other\ndescriptors: [")
	changed, err := mr.Reload()
	if err == nil || !strings.HasPrefix(err.Error(), "rule source more: ") || changed {
		t.Errorf("Reload with a bad file in more: %v, changed %v; want more's error, named, and nothing changed", err, changed)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) == 0 || a.errs[len(a.errs)-1] == nil || !strings.HasPrefix(a.errs[len(a.errs)-1].Error(), "rule source more: ") {
		t.Errorf("OnApply errors %v, want the last more's, named", a.errs)
	}
	if st := mr.Status(); st.Failures != 1 || !strings.Contains(st.LastError.Error(), "rule source more: ") {
		t.Errorf("status after the bad reload: %d failures, error %v; want more's", st.Failures, st.LastError)
	}
}

// TestMultiWaitsForEverySource: beside rule files, an xDS server that has
// pushed nothing keeps the sources from being ready, Awaiting names it,
// and its first push makes them ready while Watch runs.
func TestMultiWaitsForEverySource(t *testing.T) {
	srv := xdstest.Start(t)
	e := engine()
	mr := sources.NewMulti(e, zap.NewNop(), func(config.ReloadStatus, error) {})
	if _, err := mr.Add("files", limits.NewRuleset(nil, nil, config.Checksum(nil)), files(t, ruleDir(t, "edge"))); err != nil {
		t.Fatal(err)
	}
	if _, err := mr.Add("aigw", limits.NewRuleset(nil, nil, config.Checksum(nil)), func(target sources.Target, onApply func(config.ReloadStatus, error)) (sources.RuleSource, error) {
		return xds.NewRuleSource(target, zaptest.NewLogger(t), xds.Options{Server: srv.Addr, NodeID: "aigw", OnApply: onApply,
			BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	}); err != nil {
		t.Fatal(err)
	}
	mr.Start()
	select {
	case <-mr.Ready():
		t.Fatal("ready before the xDS server pushed")
	default:
	}
	if got := mr.Awaiting(); !strings.HasPrefix(got, "rule source aigw: ") || strings.Contains(got, "files") {
		t.Errorf("Awaiting() = %q, want aigw's alone", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mr.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	srv.Set(t, "aigw", "1", xdstest.RateLimitConfig("ai", "backend_name", 1, rlsconf.RateLimitUnit_HOUR))
	select {
	case <-mr.Ready():
	case <-time.After(xdstest.Wait):
		t.Fatalf("not ready after the push; awaiting %q", mr.Awaiting())
	}
	if got := e.Rules().Domains(); len(got) != 2 {
		t.Errorf("domains in use %v, want edge and ai", got)
	}
}
