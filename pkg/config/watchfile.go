package config

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// WatchFile calls fn whenever the file at path may have changed, until
// ctx ends, and once when its watch is in place (a change made before
// that has no event). It watches the file's directory, and when path is
// a symbolic link the directory of the file it resolves to, so that an
// in-place edit (of the file or of a link's file), an atomic rename and a
// Kubernetes ConfigMap's ..data swap are all seen; events are debounced (200ms if debounce is 0), so a
// burst calls fn once. fn must tell a real change from none itself (a
// checksum): an event in the directory may be about another file. fn runs
// on WatchFile's goroutine.
func WatchFile(ctx context.Context, path string, debounce time.Duration, log *zap.Logger, fn func()) error {
	if debounce <= 0 {
		debounce = 200 * time.Millisecond
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	warn := func(err error) { log.Warn("watch error", zap.String("path", path), zap.Error(err)) }
	// A symbolic link's file elsewhere is watched too (see addWatches),
	// again before each call, so that the watch follows a swapped link.
	targets := map[string]bool{}
	if err := watchTarget(w, path, targets); err != nil {
		warn(err)
	}
	fn()
	watchLoop(ctx, w, debounce, nil, func() {
		if err := watchTarget(w, path, targets); err != nil {
			warn(err)
		}
		fn()
	}, warn)
	return nil
}
