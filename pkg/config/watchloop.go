package config

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchLoop serves the rule watchers (Reloader.Watch, WatchLink,
// WatchFile): until ctx ends or w closes, each event that keep accepts
// (nil: every one) calls fire, once debounce has passed without another
// (0: at once), so a burst of events fires once; each error of w goes to
// warn. fire runs on the caller's goroutine.
func watchLoop(ctx context.Context, w *fsnotify.Watcher, debounce time.Duration, keep func(fsnotify.Event) bool, fire func(), warn func(error)) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			switch {
			case !ok:
				return
			case keep != nil && !keep(ev):
			case debounce <= 0:
				fire()
			default:
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			warn(err)
		case <-timer.C:
			fire()
		}
	}
}
