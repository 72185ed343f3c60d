package redisauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
)

func openSecret(t *testing.T, path string) *redisauth.Secret {
	t.Helper()
	s, err := redisauth.OpenSecret(path, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("OpenSecret: %v", err)
	}
	return s
}

// TestSecretFollowsFile: Value returns what the file holds as soon as it
// changes, by a Kubernetes ..data swap, an atomic rename or an edit in
// place, with no watch running.
func TestSecretFollowsFile(t *testing.T) {
	t.Run("data swap", func(t *testing.T) {
		vol := newSecretDir(t, map[string]string{"password": "one"})
		s := openSecret(t, vol.path("password"))
		if got := s.Value(); got != "one" {
			t.Fatalf("Value = %q, want one", got)
		}
		vol.update(t, map[string]string{"password": "two"})
		if got := s.Value(); got != "two" {
			t.Errorf("after the swap: Value = %q, want two", got)
		}
	})
	t.Run("rename", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "password")
		write(t, path, "one\r\n")
		s := openSecret(t, path)
		tmp := path + ".tmp"
		write(t, tmp, "two\n")
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if got := s.Value(); got != "two" {
			t.Errorf("after the rename: Value = %q, want two", got)
		}
	})
	t.Run("in place", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "password")
		write(t, path, "one")
		s := openSecret(t, path)
		write(t, path, "three")
		if got := s.Value(); got != "three" {
			t.Errorf("after the edit: Value = %q, want three", got)
		}
	})
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := writeFile(path, data); err != nil {
		t.Fatal(err)
	}
}

func writeFile(path, data string) error { return os.WriteFile(path, []byte(data), 0o600) }

// TestSecretKeepsLastValue: an empty file (a writer that truncates before
// it writes) or a missing one keeps the last value, and counts one
// failure per version of the file, not one per connection.
func TestSecretKeepsLastValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "password")
	write(t, path, "one")
	s := openSecret(t, path)
	write(t, path, "")
	for range 3 {
		if got := s.Value(); got != "one" {
			t.Fatalf("empty file: Value = %q, want one", got)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := s.Value(); got != "one" {
			t.Fatalf("missing file: Value = %q, want one", got)
		}
	}
	if got := s.Failures(); got != 2 {
		t.Errorf("Failures = %d, want 2", got)
	}
	write(t, path, "two")
	if got := s.Value(); got != "two" {
		t.Errorf("file back: Value = %q, want two", got)
	}
}

// TestOpenSecretRefused: a secret file that is missing or empty at start
// is an error.
func TestOpenSecretRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	write(t, empty, "\n")
	if _, err := redisauth.OpenSecret(empty, zap.NewNop()); !errors.Is(err, redisauth.ErrEmpty) {
		t.Errorf("empty file: %v, want ErrEmpty", err)
	}
	if _, err := redisauth.OpenSecret(filepath.Join(dir, "missing"), zap.NewNop()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want not found", err)
	}
}

// TestSecretWatch: Watch reads a changed file without anyone asking for
// its value, so that the change is logged and counted when it happens.
func TestSecretWatch(t *testing.T) {
	vol := newSecretDir(t, map[string]string{"password": "one"})
	s := openSecret(t, vol.path("password"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	// The watch may start after the swap: each round swaps again, until
	// the watch has seen a change. Bounded: 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; s.Changes() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the watch saw no change in 10s")
		}
		vol.update(t, map[string]string{"password": "v" + string(rune('a'+i%26))})
		waitChange(s, 500*time.Millisecond)
	}
}

// waitChange waits until s has changed or d has passed.
func waitChange(s *redisauth.Secret, d time.Duration) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(d)
	for s.Changes() == 0 {
		select {
		case <-tick.C:
		case <-timeout:
			return
		}
	}
}
