package config

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// WatchLink calls reload whenever the symbolic link at path is replaced
// (created, or renamed onto), until ctx ends, as envoyproxy/ratelimit
// does for RUNTIME_ROOT with RUNTIME_WATCH_ROOT: a release swaps the link
// to a new directory, which a Reloader's watch, on the old directory,
// cannot see. It watches the link's directory, and calls reload once as
// it starts, for a swap before the watch began. log gets a line for each
// reload and each watch error.
func WatchLink(ctx context.Context, path string, reload func(), log *zap.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch link %s: %w", path, err)
	}
	defer w.Close()
	path = filepath.Clean(path)
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch link %s: %w", path, err)
	}
	// A swap between the rules' first load and this watch has no event:
	// reload once (a no-op if the files are the same).
	reload()
	replaced := func(ev fsnotify.Event) bool {
		return filepath.Clean(ev.Name) == path && ev.Op&(fsnotify.Create|fsnotify.Write) != 0
	}
	watchLoop(ctx, w, 0, replaced, func() {
		log.Info("link replaced: reloading config", zap.String("link", path))
		reload()
	}, func(err error) {
		log.Warn("link watch error", zap.String("link", path), zap.Error(err))
	})
	return nil
}
