package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ReloadStatus describes the ruleset in use and the last reload attempt.
type ReloadStatus struct {
	// Checksum and LoadedAt describe the ruleset in use.
	Checksum string
	LoadedAt time.Time
	Files    []string
	// LastError is the last failed reload's error, or nil if the last
	// attempt succeeded (or none failed yet). The ruleset in use is then
	// the last good one.
	LastError error
	// LastAttempt is when a changed file set was last parsed.
	LastAttempt time.Time
	Successes   int
	Failures    int
	// Reads counts the times the files were read, changed or not: every
	// Reload, and the one Watch makes once its watches are in place.
	Reads int
}

// Reloader reloads an Engine's rules from a path when they change. Reload
// is safe for concurrent use; Watch runs until its context ends.
type Reloader struct {
	path     string
	opts     Options
	engine   Target
	log      *zap.Logger
	debounce time.Duration
	notify   func(ReloadStatus, error)
	readFile func(string) ([]byte, error) // os.ReadFile; tests replace it

	mu     sync.Mutex // serializes reloads; guards status
	status ReloadStatus
}

// loaded is closed: the rule files are read before a Reloader is made.
var loaded = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Ready is closed once the reloader has its first rules, which it has
// from the start: NewReloader takes rules already loaded. A rule source
// from an xDS server (pkg/xds) has the same method, closed at its first
// push, so that the program waits on either alike.
func (r *Reloader) Ready() <-chan struct{} { return loaded }

// Awaiting says what Ready waits for: the rule files, which the
// reloader has from the start.
func (r *Reloader) Awaiting() string { return "the rule files at " + r.path }

// ReloaderOptions tunes a Reloader. The zero value is ready to use.
type ReloaderOptions struct {
	// Options is how the rule files combine, as for Load.
	Options Options
	// Debounce is how long the watcher waits for file events to stop
	// before reloading. Default 200ms.
	Debounce time.Duration
	// OnReload, if set, is called after every reload attempt that found
	// changed files, with the new status and the attempt's error.
	OnReload func(ReloadStatus, error)
}

// Target holds the rules a Reloader keeps: a *limits.Engine, or one
// source's share of an engine's rules (pkg/sources).
type Target interface {
	Rules() *limits.Ruleset
	SetRules(*limits.Ruleset)
}

// NewReloader returns a reloader for engine, whose rules in use were just
// loaded from path.
func NewReloader(path string, engine Target, log *zap.Logger, ro ReloaderOptions) *Reloader {
	if ro.Debounce <= 0 {
		ro.Debounce = 200 * time.Millisecond
	}
	rs := engine.Rules()
	return &Reloader{
		path: path, opts: ro.Options, engine: engine, log: log, debounce: ro.Debounce, notify: ro.OnReload,
		readFile: os.ReadFile,
		status:   ReloadStatus{Checksum: rs.Checksum, Files: rs.Files, LoadedAt: time.Now()},
	}
}

// Status returns the reload status.
func (r *Reloader) Status() ReloadStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Reload reads the rule files and, if their checksum differs from the
// rules in use, parses them and swaps them in. A file set that fails to
// parse, or that holds no rule (ErrNoRules, unless Options.AllowEmpty), is
// rejected whole, with every problem logged at Error, and the rules in use
// stay. It reports whether new rules were swapped in. A swap that drops a
// domain of the rules in use, or leaves none, is logged at Warn.
//
// Files equal to the rules in use change nothing, except after a rejected
// reload: reading them back is then a successful reload (the rules in use
// are what the files say again), reported to OnReload without an error.
func (r *Reloader) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Reads++
	files, err := readFiles(r.path, r.readFile)
	if err == nil && checksum(files) == r.status.Checksum {
		if r.status.LastError != nil {
			r.restored()
		}
		return false, nil
	}
	r.status.LastAttempt = time.Now()
	var rs *limits.Ruleset
	if err == nil {
		rs, err = Parse(files, r.opts)
	}
	if err == nil {
		err = requireRules(r.path, rs, r.opts)
	}
	if err != nil {
		r.status.Failures++
		r.status.LastError = err
		r.log.Error("config reload rejected; keeping the rules in use",
			zap.String("path", r.path), zap.String("checksum", r.status.Checksum), zap.Error(err))
		if r.notify != nil {
			r.notify(r.status, err)
		}
		return false, err
	}
	old := r.engine.Rules()
	r.engine.SetRules(rs)
	r.status = ReloadStatus{
		Checksum: rs.Checksum, LoadedAt: time.Now(), Files: rs.Files, LastAttempt: r.status.LastAttempt,
		Successes: r.status.Successes + 1, Failures: r.status.Failures, Reads: r.status.Reads,
	}
	r.logReloaded(old, rs)
	if r.notify != nil {
		r.notify(r.status, nil)
	}
	return true, nil
}

// logReloaded logs one line for a swap from old to rs: at Warn if it
// leaves no rule or drops domains of old, so the log says what went.
func (r *Reloader) logReloaded(old, rs *limits.Ruleset) {
	fields := []zap.Field{zap.String("path", r.path), zap.String("checksum", rs.Checksum),
		zap.Int("files", len(rs.Files)), zap.Strings("domains", rs.Domains())}
	dropped := DroppedDomains(old, rs)
	switch {
	case len(rs.Domains()) == 0:
		r.log.Warn("config reloaded without rules; every request gets OK", append(fields, zap.Strings("dropped_domains", dropped))...)
	case len(dropped) > 0:
		r.log.Warn("config reloaded; domains dropped", append(fields, zap.Strings("dropped_domains", dropped))...)
	default:
		r.log.Info("config reloaded", fields...)
	}
}

// DroppedDomains returns the domains of old that rs does not have: what a
// swap from old to rs stops limiting, for its log line.
func DroppedDomains(old, rs *limits.Ruleset) []string {
	var dropped []string
	for _, d := range old.Domains() {
		if !rs.HasDomain(d) {
			dropped = append(dropped, d)
		}
	}
	return dropped
}

// restored records that the files are the rules in use again after a
// rejected reload. Requires r.mu held.
func (r *Reloader) restored() {
	r.status.LastAttempt = time.Now()
	r.status.LastError = nil
	r.status.Successes++
	r.log.Info("config restored to the rules in use", zap.String("path", r.path), zap.String("checksum", r.status.Checksum))
	if r.notify != nil {
		r.notify(r.status, nil)
	}
}

// Watch reloads whenever files under the config path change, until ctx
// ends. For a directory it watches the directory and its subdirectories
// (not dot-directories: a ConfigMap's ..data swap shows up as an event in
// the directory itself), and the directory's own name in its parent, so
// a directory removed and created again, or a swapped link to one, is
// seen; for a file it watches the file's directory, so replacing the file
// or swapping a symbolic link is seen too. Events are
// debounced, and the checksum makes a burst of events, or an event that
// changed nothing, reload at most once. A change of permissions alone
// reloads too: a file or directory that became unreadable fails the reload
// (the rules in use stay, and the failure shows, before a restart would
// fail), and one made readable again after a failure loads.
func (r *Reloader) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	defer w.Close()
	// targets are the files rule files link to: an event about one is
	// about the config wherever the file is. Only this goroutine uses it.
	targets := map[string]bool{}
	if err := r.addWatches(w, targets); err != nil {
		return err
	}
	parent := r.parentDir()
	if parent != "" {
		if err := w.Add(parent); err != nil {
			// Edits still reload; only a re-created directory is missed.
			r.log.Warn("config watch: cannot watch the parent directory; if the config directory is re-created, reload with SIGHUP",
				zap.String("dir", parent), zap.Error(err))
			parent = ""
		}
	}
	// The rules were loaded before the watches existed: a change made in
	// between (a ConfigMap swapped while the sidecar started) has no
	// event. Read once more; unchanged files cost a checksum.
	r.Reload() //nolint:errcheck // Reload logs its own errors
	inConfig := func(ev fsnotify.Event) bool {
		return parent == "" || targets[filepath.Clean(ev.Name)] || !r.besideConfig(ev.Name, parent)
	}
	warn := func(err error) { r.log.Warn("config watch error", zap.Error(err)) }
	watchLoop(ctx, w, r.debounce, inConfig, func() {
		// Watch new subdirectories, or a re-created directory, before
		// reading: a change made after this is an event of its own.
		if err := r.addWatches(w, targets); err != nil && !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		r.Reload() //nolint:errcheck // Reload logs its own errors, a missing path too
	}, warn)
	return nil
}

// parentDir is the directory that holds the config directory, or "" when
// the config is a file (whose directory addWatches watches already) or
// has no parent to watch.
func (r *Reloader) parentDir() string {
	info, err := os.Stat(r.path)
	if err != nil || !info.IsDir() {
		return ""
	}
	clean := filepath.Clean(r.path)
	if parent := filepath.Dir(clean); parent != clean {
		return parent
	}
	return ""
}

// besideConfig reports whether an event named name is about another entry
// of the config directory's parent, not the config directory itself.
func (r *Reloader) besideConfig(name, parent string) bool {
	name = filepath.Clean(name)
	return filepath.Dir(name) == parent && name != filepath.Clean(r.path)
}

// addWatches watches the config: a file's directory, or a directory and
// its subdirectories; and, for each rule file that is a symbolic link
// (the config file itself, or a file of the directory), the directory of
// the file it resolves to, so that an edit of that file in place, which
// changes nothing in the linking directory, is seen too; it adds those
// files to targets. It is called again before each reload, so the
// watches follow a swapped link.
func (r *Reloader) addWatches(w *fsnotify.Watcher, targets map[string]bool) error {
	info, err := os.Stat(r.path)
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	if !info.IsDir() {
		if err := w.Add(filepath.Dir(r.path)); err != nil {
			return fmt.Errorf("watch config: %w", err)
		}
		r.watchTarget(w, r.path, targets)
		return nil
	}
	if err := w.Add(r.path); err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	err = walkConfig(r.path, func(p string, d fs.DirEntry) error {
		if d.IsDir() {
			return w.Add(p)
		}
		r.watchTarget(w, p, targets)
		return nil
	})
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	return nil
}

// watchTarget is the package's watchTarget, whose failure (a directory
// that cannot be watched) costs only the reload on an edit there: it is
// logged, and the config is watched without it.
func (r *Reloader) watchTarget(w *fsnotify.Watcher, p string, targets map[string]bool) {
	if err := watchTarget(w, p, targets); err != nil {
		r.log.Warn("config watch: cannot watch the directory of a linked rule file; after editing it, reload with SIGHUP",
			zap.String("file", p), zap.Error(err))
	}
}

// watchTarget watches the directory of the file a symbolic link at p
// resolves to, when p is one and that directory is not p's, and adds the
// file to targets. A link that resolves to nothing is left alone: reading
// it fails, and reports.
func watchTarget(w *fsnotify.Watcher, p string, targets map[string]bool) error {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil
	}
	targets[real] = true
	dir := filepath.Dir(real)
	if linkDir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil && linkDir == dir {
		return nil
	}
	return w.Add(dir)
}

// checksum is the SHA-256 over a file set that Parse records as
// Ruleset.Checksum.
func checksum(files []File) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}
