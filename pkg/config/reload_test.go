package config_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

const rulesV1 = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
const rulesV2 = rulesV1 + "  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
const rulesV3 = rulesV2 + "  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
const rulesBad = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 10}\n"

// swapConfigMap lays out dir the way the kubelet mounts a ConfigMap and
// updates it: files in a timestamped dot-directory, a ..data link to it,
// swapped atomically by rename, and top-level links through ..data.
func swapConfigMap(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	real := filepath.Join(dir, "..2026_11_22_"+stamp)
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(real, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(real), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

// watching starts a Reloader's Watch on path, after calling setup on it,
// and returns it with a function that waits, up to 5 s, for the reload
// counters to reach the given values.
func watching(t *testing.T, path string, e *limits.Engine, setup ...func(*config.Reloader)) (*config.Reloader, func(successes, failures int)) {
	t.Helper()
	var mu sync.Mutex
	changed := sync.NewCond(&mu)
	r := config.NewReloader(path, e, zap.NewNop(), config.ReloaderOptions{
		Debounce: 20 * time.Millisecond,
		OnReload: func(config.ReloadStatus, error) { mu.Lock(); changed.Broadcast(); mu.Unlock() },
	})
	for _, f := range setup {
		f(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Watch(ctx); err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	// The watcher reads the files once its watches are in place: a change
	// made before is seen then, one made after by its event. A change
	// half-written while that first read runs would be read half, so
	// the test changes nothing until it has run.
	waitReads(t, r, 1)
	wait := func(successes, failures int) {
		t.Helper()
		deadline := time.AfterFunc(5*time.Second, func() { mu.Lock(); changed.Broadcast(); mu.Unlock() })
		defer deadline.Stop()
		start := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for {
			st := r.Status()
			if st.Successes == successes && st.Failures == failures {
				return
			}
			if st.Successes > successes || st.Failures > failures || time.Since(start) > 5*time.Second {
				t.Fatalf("reloads: %d good, %d bad; want %d good, %d bad (last error: %v)", st.Successes, st.Failures, successes, failures, st.LastError)
			}
			changed.Wait()
		}
	}
	return r, wait
}

// waitReads waits, for up to 5 s, until r has read its files n times.
func waitReads(t *testing.T, r *config.Reloader, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); r.Status().Reads < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the files were read %d times, want %d within 5s", r.Status().Reads, n)
		}
	}
}

func load(t *testing.T, path string) *limits.Engine {
	t.Helper()
	rs, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
}

func hasRule(e *limits.Engine, key string) bool {
	return e.Rules().Match("edge", []limits.Entry{{Key: key, Value: "x"}}) != nil
}

func TestReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	swapConfigMap(t, dir, "01", map[string]string{"rules.yaml": rulesV1})
	e := load(t, dir)
	_, wait := watching(t, dir, e)

	swapConfigMap(t, dir, "02", map[string]string{"rules.yaml": rulesV2})
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("new rules not in use after the ..data swap")
	}
	// The kubelet then deletes the old directory; nothing changes.
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_22_01")); err != nil {
		t.Fatal(err)
	}
	swapConfigMap(t, dir, "03", map[string]string{"rules.yaml": rulesV3})
	wait(2, 0)
	if !hasRule(e, "path") {
		t.Fatal("third version not in use")
	}
	if got := len(e.Rules().Files); got != 1 {
		t.Errorf("read %d files, want 1 (dot-directories must be skipped)", got)
	}
}

func TestReloadRenameEditAddRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(path, rulesV1)
	e := load(t, dir)
	r, wait := watching(t, dir, e)

	// Atomic rename over the file.
	write(filepath.Join(dir, ".rules.yaml.tmp"), rulesV2)
	if err := os.Rename(filepath.Join(dir, ".rules.yaml.tmp"), path); err != nil {
		t.Fatal(err)
	}
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("rename: new rules not in use")
	}
	// In-place edit.
	write(path, rulesV3)
	wait(2, 0)
	if !hasRule(e, "path") {
		t.Fatal("edit: new rules not in use")
	}
	// A file added, then removed.
	write(filepath.Join(dir, "more.yml"), "domain: other\ndescriptors: []\n")
	wait(3, 0)
	if !e.Rules().HasDomain("other") {
		t.Fatal("added file not loaded")
	}
	if err := os.Remove(filepath.Join(dir, "more.yml")); err != nil {
		t.Fatal(err)
	}
	wait(4, 0)
	if e.Rules().HasDomain("other") {
		t.Fatal("removed file still loaded")
	}
	// Rewriting the same bytes changes nothing, and a dot-file is ignored:
	// the files are read again, and neither a reload nor a failure comes
	// of it.
	reads := r.Status().Reads
	write(path, rulesV3)
	write(filepath.Join(dir, ".swap.yaml"), "not: [valid")
	waitReads(t, r, reads+1)
	wait(4, 0)
}

func TestReloadSingleFileSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	swapConfigMap(t, dir, "01", map[string]string{"rules.yaml": rulesV1})
	path := filepath.Join(dir, "rules.yaml")
	e := load(t, path)
	_, wait := watching(t, path, e)
	swapConfigMap(t, dir, "02", map[string]string{"rules.yaml": rulesV2})
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("new rules not in use after swapping the link behind --config FILE")
	}
}

// TestReloadSymlinkTargetEdited: --config names a symbolic link to a file
// in another directory; editing that file in place reloads, as an edit
// of the file itself does. Only the link's directory was watched.
func TestReloadSymlinkTargetEdited(t *testing.T) {
	target := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(target, []byte(rulesV1), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "rules.yaml")
	mustSymlink(t, target, link)
	e := load(t, link)
	_, wait := watching(t, link, e)
	if err := os.WriteFile(target, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("new rules not in use after editing the file behind --config's link")
	}
}

// TestReloadDirectoryLinkedFileEdited: a rule file in --config's directory
// is a symbolic link to a file elsewhere; editing that file reloads.
func TestReloadDirectoryLinkedFileEdited(t *testing.T) {
	target := filepath.Join(t.TempDir(), "shared.yaml")
	if err := os.WriteFile(target, []byte(rulesV1), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustSymlink(t, target, filepath.Join(dir, "rules.yaml"))
	e := load(t, dir)
	_, wait := watching(t, dir, e)
	if err := os.WriteFile(target, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("new rules not in use after editing the file a rule file links to")
	}
}

// TestReloadLinkedFileBesideDirectory: the file a rule file links to is
// in the config directory's parent, whose other entries's events the
// watch ignores; editing it reloads all the same.
func TestReloadLinkedFileBesideDirectory(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "shared.yaml")
	if err := os.WriteFile(target, []byte(rulesV1), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join("..", "shared.yaml"), filepath.Join(dir, "rules.yaml"))
	e := load(t, dir)
	_, wait := watching(t, dir, e)
	if err := os.WriteFile(target, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("new rules not in use after editing the linked file beside the config directory")
	}
}

func TestReloadBadConfigKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	e := load(t, dir)
	before := e.Rules()
	r, wait := watching(t, dir, e)
	if err := os.WriteFile(path, []byte(rulesBad), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(0, 1)
	if e.Rules() != before {
		t.Fatal("a bad config replaced the rules in use")
	}
	st := r.Status()
	if st.Checksum != before.Checksum || st.LastError == nil || !strings.Contains(st.LastError.Error(), "rules.yaml:4: descriptors[0].rate_limit.unit") {
		t.Errorf("status %+v; want the old checksum and an error naming rules.yaml:4 and the path", st)
	}
	// Fixing the file recovers.
	if err := os.WriteFile(path, []byte(rulesV3), 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 1)
	if !hasRule(e, "path") || r.Status().LastError != nil {
		t.Errorf("fixed config not in use, or error kept: %v", r.Status().LastError)
	}
}

// TestReloadKeepsCounters consumes part of a limit, reloads an unrelated
// change, and checks nothing was forgotten: keys come from rules and
// entries, never from a config version.
func TestReloadKeepsCounters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesV1), 0o644); err != nil {
		t.Fatal(err)
	}
	e := load(t, dir)
	r := config.NewReloader(dir, e, zap.NewNop(), config.ReloaderOptions{})
	req := &limits.Request{Domain: "edge", Hits: 3, Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "u1"}}}}}
	var d limits.Decision
	if err := e.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want a change", changed, err)
	}
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("second Reload of the same files = %v, %v; want no change", changed, err)
	}
	if err := e.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Statuses[0].Remaining; got != 4 {
		t.Errorf("remaining after reload = %d, want 4 (10 - 3 before - 3 after)", got)
	}
}

// readAsNonRoot reads a file as a process without CAP_DAC_OVERRIDE would:
// a file without any read permission bit fails with a permission error.
// The tests run as root in some places, and root reads a chmod 000 file.
func readAsNonRoot(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o444 == 0 {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
	}
	return os.ReadFile(p)
}

// TestReloadAfterChmod: a rule file that cannot be read fails its reload;
// making it readable, with no other change, must reload it. fsnotify
// reports the fix as a CHMOD event only. As root the permission check is
// emulated by readAsNonRoot; the events are real either way.
func TestReloadAfterChmod(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesV1), 0o644); err != nil {
		t.Fatal(err)
	}
	e := load(t, dir)
	var setup []func(*config.Reloader)
	if _, err := os.ReadFile(path); err == nil && os.Geteuid() == 0 {
		setup = append(setup, func(r *config.Reloader) { config.SetReadFile(r, readAsNonRoot) })
	}
	r, wait := watching(t, dir, e, setup...)

	// New rules arrive unreadable, in one rename so that no reload can
	// read them before the chmod.
	tmp := filepath.Join(dir, ".rules.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(rulesV2), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wait(0, 1)
	if err := r.Status().LastError; !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("last error %v, want a permission error", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 1)
	if !hasRule(e, "tenant") {
		t.Fatal("the rules made readable are not in use")
	}
}

// TestReloadRestoresInUse: after a rejected reload, putting back exactly
// the rules in use is a successful reload, so the reload gauge says 1
// again, though nothing is swapped in.
func TestReloadRestoresInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(data string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(rulesV1)
	e := load(t, dir)
	before := e.Rules()
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	var errs []error
	r := config.NewReloader(dir, e, zap.NewNop(), config.ReloaderOptions{OnReload: func(st config.ReloadStatus, err error) {
		errs = append(errs, err)
		m.Reloaded(st, err)
	}})

	write(rulesBad)
	if changed, err := r.Reload(); changed || err == nil {
		t.Fatalf("Reload of bad rules = %v, %v; want an error", changed, err)
	}
	gauge := func(want string) {
		t.Helper()
		const name = "ratelimit_sidecar_config_last_reload_successful"
		exp := "# HELP " + name + " 1 if the last config reload succeeded (or none failed since start).\n# TYPE " + name + " gauge\n" + name + " " + want + "\n"
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(exp), name); err != nil {
			t.Error(err)
		}
	}
	gauge("0")

	write(rulesV1)
	if changed, err := r.Reload(); changed || err != nil {
		t.Fatalf("Reload of the rules in use = %v, %v; want no change and no error", changed, err)
	}
	gauge("1")
	st := r.Status()
	if st.LastError != nil || st.Successes != 1 || st.Failures != 1 || st.Checksum != before.Checksum {
		t.Errorf("status %+v; want no error, 1 success, 1 failure, the old checksum", st)
	}
	if e.Rules() != before {
		t.Error("the rules in use were replaced")
	}
	if len(errs) != 2 || errs[1] != nil {
		t.Errorf("OnReload errors %v, want [<error> <nil>]", errs)
	}
	// Once recovered, the same files are no reload at all.
	if changed, err := r.Reload(); changed || err != nil || len(errs) != 2 {
		t.Errorf("third Reload = %v, %v with %d notifications; want nothing", changed, err, len(errs))
	}
}

// TestReloadNoRulesRefused: a reload that would leave no rules at all (the
// rule files deleted, renamed away, or the directory gone) is refused like
// any bad reload: the rules in use keep deciding, one Error names the path
// and the reason, and putting the rules back clears the failure.
func TestReloadNoRulesRefused(t *testing.T) {
	tests := []struct {
		name string
		give func(t *testing.T, dir string) // takes dir's rules away
		want string
	}{
		{name: "files removed", give: func(t *testing.T, dir string) {
			mustRemove(t, filepath.Join(dir, "rules.yaml"))
		}, want: "no rule files found"},
		{name: "renamed to a dot-file", give: func(t *testing.T, dir string) {
			mustRename(t, filepath.Join(dir, "rules.yaml"), filepath.Join(dir, ".rules.yaml"))
		}, want: "no rule files found"},
		{name: "renamed to another extension", give: func(t *testing.T, dir string) {
			mustRename(t, filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "rules.yaml.orig"))
		}, want: "no rule files found"},
		{name: "emptied", give: func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, "rules.yaml"), "")
		}, want: "rules.yaml: domain: required, and the file is empty"},
		{name: "..data points nowhere", give: func(t *testing.T, dir string) {
			mustRemove(t, filepath.Join(dir, "rules.yaml"))
			mustSymlink(t, "..2026_11_22_00_00_00.1", filepath.Join(dir, "..data"))
			mustSymlink(t, filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml"))
		}, want: "rules.yaml: no such file or directory"},
		{name: "directory removed", give: func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, want: "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "rules")
			mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV1)
			e := load(t, dir)
			before := e.Rules()
			core, logs := observer.New(zap.InfoLevel)
			r := config.NewReloader(dir, e, zap.New(core), config.ReloaderOptions{})

			tt.give(t, dir)
			changed, err := r.Reload()
			if changed || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload = %v, %v; want a refusal with %q", changed, err, tt.want)
			}
			if e.Rules() != before {
				t.Error("the rules in use were replaced")
			}
			if st := r.Status(); st.LastError == nil || st.Failures != 1 || st.Successes != 0 {
				t.Errorf("status %+v; want 1 failure with its error", st)
			}
			refused := logs.FilterMessageSnippet("rejected").FilterField(zap.String("path", dir)).All()
			if len(refused) != 1 || refused[0].Level != zap.ErrorLevel || !strings.Contains(fmt.Sprint(refused[0].ContextMap()["error"]), tt.want) {
				t.Errorf("log %v; want one Error naming %s and saying %q", logs.All(), dir, tt.want)
			}

			// The rules put back: no swap, and the failure is over.
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV1)
			if changed, err := r.Reload(); changed || err != nil {
				t.Fatalf("Reload of the rules in use = %v, %v; want no change, no error", changed, err)
			}
			if st := r.Status(); st.LastError != nil || st.Successes != 1 {
				t.Errorf("status %+v; want the error cleared and 1 success", st)
			}
		})
	}
}

// TestReloadWarnsOfDroppedDomains: a reload that drops a domain in use is
// accepted (it may be deliberate), and its one log line, at Warn, names
// the domains dropped.
func TestReloadWarnsOfDroppedDomains(t *testing.T) {
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "edge.yaml"), rulesV1)
	mustWriteFile(t, filepath.Join(dir, "other.yaml"), "domain: other\ndescriptors: []\n")
	mustWriteFile(t, filepath.Join(dir, "third.yaml"), "domain: third\ndescriptors: []\n")
	e := load(t, dir)
	core, logs := observer.New(zap.InfoLevel)
	r := config.NewReloader(dir, e, zap.New(core), config.ReloaderOptions{})

	mustRemove(t, filepath.Join(dir, "other.yaml"))
	mustRemove(t, filepath.Join(dir, "third.yaml"))
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want the change accepted", changed, err)
	}
	all := logs.All()
	if len(all) != 1 || all[0].Level != zap.WarnLevel {
		t.Fatalf("log %v; want one Warn", all)
	}
	if got := fmt.Sprint(all[0].ContextMap()["dropped_domains"]); got != "[other third]" {
		t.Errorf("dropped_domains = %s, want [other third]", got)
	}

	// Adding a domain back is an ordinary reload, at Info.
	mustWriteFile(t, filepath.Join(dir, "other.yaml"), "domain: other\ndescriptors: []\n")
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	if all := logs.All(); len(all) != 2 || all[1].Level != zap.InfoLevel {
		t.Errorf("log %v; want an Info line for the second reload", all)
	}
}

// TestReloadDirectoryRecreated: a config directory removed and put back
// (rm -rf and a new one renamed into place) is still watched: the new
// rules load without a SIGHUP.
func TestReloadDirectoryRecreated(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "rules")
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV1)
	e := load(t, dir)
	_, wait := watching(t, dir, e)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wait(0, 1)
	mustWriteFile(t, filepath.Join(parent, ".rules.new", "rules.yaml"), rulesV2)
	mustRename(t, filepath.Join(parent, ".rules.new"), dir)
	wait(1, 1)
	if !hasRule(e, "tenant") {
		t.Fatal("the re-created directory's rules are not in use")
	}
	// And the new directory is watched in turn.
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV3)
	wait(2, 1)
	if !hasRule(e, "path") {
		t.Fatal("an edit in the re-created directory was not loaded")
	}
}

// TestReloadDirectoryLinkSwap: --config is a link to a directory, swapped
// to another directory on deploy (envoyproxy/ratelimit's RUNTIME_ROOT
// convention); the swap reloads.
func TestReloadDirectoryLinkSwap(t *testing.T) {
	parent := t.TempDir()
	mustWriteFile(t, filepath.Join(parent, "v1", "rules.yaml"), rulesV1)
	mustWriteFile(t, filepath.Join(parent, "v2", "rules.yaml"), rulesV2)
	link := filepath.Join(parent, "current")
	mustSymlink(t, "v1", link)
	e := load(t, link)
	_, wait := watching(t, link, e)

	mustSymlink(t, "v2", filepath.Join(parent, ".current.tmp"))
	mustRename(t, filepath.Join(parent, ".current.tmp"), link)
	wait(1, 0)
	if !hasRule(e, "tenant") {
		t.Fatal("the rules behind the swapped link are not in use")
	}
}

// TestReloadIgnoresTheParentsOtherEntries: the parent directory is watched
// for the config directory's own name only. Were its other entries to
// reload, a failing config would be refused, and logged, again on every
// change next to it.
func TestReloadIgnoresTheParentsOtherEntries(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "rules")
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV1)
	e := load(t, dir)
	r, wait := watching(t, dir, e)
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesBad)
	wait(0, 1)
	reads := r.Status().Reads
	for i := range 3 {
		mustWriteFile(t, filepath.Join(parent, fmt.Sprintf("other-%d.yaml", i)), rulesV1)
		mustWriteFile(t, filepath.Join(parent, "rules.yaml.orig"), rulesV1)
	}
	// Nothing may happen, so nothing can be waited for: the sleep is how
	// long the test looks (5 debounce periods). A slow machine can make
	// it miss a wrong read, never fail a right watcher.
	time.Sleep(100 * time.Millisecond)
	wait(0, 1)
	if got := r.Status().Reads; got != reads {
		t.Errorf("the files were read %d times after changes beside the config directory, want none", got-reads)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// TestReloadNoRulesAllowed: with AllowEmpty, a config without rules loads,
// and a reload to no rules is accepted, logged at Warn each time.
func TestReloadNoRulesAllowed(t *testing.T) {
	dir := t.TempDir()
	opts := config.Options{AllowEmpty: true}
	rs, err := config.Load(dir, opts)
	if err != nil {
		t.Fatalf("Load of an empty directory with AllowEmpty: %v", err)
	}
	e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
	core, logs := observer.New(zap.InfoLevel)
	r := config.NewReloader(dir, e, zap.New(core), config.ReloaderOptions{Options: opts})

	path := filepath.Join(dir, "rules.yaml")
	for i := range 2 {
		mustWriteFile(t, path, rulesV1)
		if changed, err := r.Reload(); !changed || err != nil {
			t.Fatalf("reload %d to rules = %v, %v", i, changed, err)
		}
		mustRemove(t, path)
		if changed, err := r.Reload(); !changed || err != nil {
			t.Fatalf("reload %d to no rules = %v, %v; want it accepted", i, changed, err)
		}
		if got := e.Rules().Domains(); len(got) != 0 {
			t.Fatalf("domains %q after the files went, want none", got)
		}
	}
	warned := logs.FilterLevelExact(zap.WarnLevel).FilterMessageSnippet("without rules").All()
	if len(warned) != 2 || fmt.Sprint(warned[0].ContextMap()["dropped_domains"]) != "[edge]" {
		t.Errorf("log %v; want 2 Warns of no rules, naming the dropped domain edge", logs.All())
	}
}

// TestReloadUnreadableDirectory: a config directory that cannot be read
// fails its reload with a permission error naming it, the rules in use
// stay, and making it readable again reloads. Root reads any directory,
// so the test needs another user.
func TestReloadUnreadableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a chmod 000 directory")
	}
	dir := filepath.Join(t.TempDir(), "rules")
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), rulesV1)
	e := load(t, dir)
	before := e.Rules()
	r, wait := watching(t, dir, e)
	t.Cleanup(func() { os.Chmod(dir, 0o755) }) //nolint:errcheck // so TempDir can remove it

	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	wait(0, 1)
	if err := r.Status().LastError; !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), dir) {
		t.Errorf("last error %v, want a permission error naming %s", err, dir)
	}
	if e.Rules() != before {
		t.Error("the rules in use were replaced")
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wait(1, 1)
	if r.Status().LastError != nil {
		t.Errorf("last error %v after the directory became readable", r.Status().LastError)
	}
}

// TestReloadFileMadeUnreadable: chmod 000 on a rule file in use fails a
// reload at once (gauge 0, while the rules in use stay), rather than only
// at the next edit, or at a restart that could not start. As root the
// permission check is emulated by readAsNonRoot; the events are real.
func TestReloadFileMadeUnreadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	mustWriteFile(t, path, rulesV1)
	e := load(t, dir)
	before := e.Rules()
	var setup []func(*config.Reloader)
	if os.Geteuid() == 0 {
		setup = append(setup, func(r *config.Reloader) { config.SetReadFile(r, readAsNonRoot) })
	}
	r, wait := watching(t, dir, e, setup...)
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	wait(0, 1)
	if err := r.Status().LastError; !errors.Is(err, fs.ErrPermission) {
		t.Errorf("last error %v, want a permission error", err)
	}
	if e.Rules() != before {
		t.Error("the rules in use were replaced")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(1, 1)
}
