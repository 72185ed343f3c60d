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

// TestWatchFileLinkTargetEdited: WatchFile on a symbolic link to a file in
// another directory calls back when that file is edited in place.
func TestWatchFileLinkTargetEdited(t *testing.T) {
	target := filepath.Join(t.TempDir(), "overlay.yaml")
	if err := os.WriteFile(target, []byte("overlays: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "overlay.yaml")
	mustSymlink(t, target, link)
	calls := make(chan struct{}, 1) // a call while the test is not waiting is one to see
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- config.WatchFile(ctx, link, 10*time.Millisecond, zap.NewNop(), func() {
			select {
			case calls <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchFile: %v", err)
		}
	})
	waitCall := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("no call %s", what)
		}
	}
	waitCall("once the watch is in place")
	if err := os.WriteFile(target, []byte("overlays: []\n# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitCall("after the link's file was edited in place")
}
