package config_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// TestWatchLink: WatchLink reloads once as it starts and again when the
// link is swapped to another directory by a rename onto it, as a
// release does, and returns when its context ends.
func TestWatchLink(t *testing.T) {
	parent := t.TempDir()
	for _, d := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(parent, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(parent, "current")
	mustSymlink(t, "v1", link)
	reloads := make(chan struct{}, 8) // more than the test makes
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- config.WatchLink(ctx, link, func() { reloads <- struct{}{} }, zap.NewNop())
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-reloads:
		case <-time.After(10 * time.Second):
			t.Fatalf("no reload %s within 10 s", what)
		}
	}
	wait("as the watch started") // the watch is in place from here
	mustSymlink(t, "v2", filepath.Join(parent, ".current.tmp"))
	mustRename(t, filepath.Join(parent, ".current.tmp"), link)
	wait("after the swap")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
