package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
)

// TestStartRefusesNoRules: a config path without rules stops startup with
// a message that names the path, says what was not found and how to start
// anyway; a missing path names the path.
func TestStartRefusesNoRules(t *testing.T) {
	empty := t.TempDir()
	write(t, filepath.Join(empty, "rules.yaml.orig"), userRules)
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name string
		give string
		want []string
	}{
		{name: "no rule files", give: empty, want: []string{empty, "no rule files found", "*.yaml", "--allow-empty-rules"}},
		{name: "missing path", give: missing, want: []string{missing, "no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Bounded: a sidecar that starts anyway serves until ctx ends.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := run(ctx, []string{"--config", tt.give, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("run started without rules, and served until cancelled")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestStartWithAllowEmptyRules: RLS_ALLOW_EMPTY_RULES (or the flag) starts
// without rules, says so at Warn, and answers OK.
func TestStartWithAllowEmptyRules(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []sidecarOpts{
		{args: []string{"--config", dir}, env: map[string]string{"RLS_ALLOW_EMPTY_RULES": "true"}},
		{args: []string{"--config", dir, "--allow-empty-rules"}},
	} {
		s := startSidecar(t, o)
		var warned bool
		for _, line := range strings.Split(s.log.String(), "\n") {
			warned = warned || strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "without rules") && strings.Contains(line, dir)
		}
		if !warned {
			t.Errorf("%v: no Warn about starting without rules naming %s:\n%s", o, dir, s.log)
		}
		resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 0))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("%v: without rules: %v, %v; want OK", o, resp, err)
		}
	}
}

// TestReloadFailureClearedThroughSidecar: through the running sidecar, a
// reload that leaves no rules, and a bad edit, are each refused (gauge 0,
// last_error in /debug/config, the old rules still limit), and putting
// back exactly the rules in use clears the failure: gauge 1, no
// last_error.
func TestReloadFailureClearedThroughSidecar(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, userRules)
	// Only SIGHUP reloads: the watcher may not watch yet when the test
	// first changes the files.
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--reload-debounce", "1h"}})
	ctx := context.Background()
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 3)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("alice's 3 hits: %v, %v", resp, err)
	}
	lastError := func() string {
		t.Helper()
		var v admin.ConfigView
		if err := json.Unmarshal([]byte(s.getBody(t, "/debug/config")), &v); err != nil {
			t.Fatal(err)
		}
		return v.LastError
	}
	gauge := func(v string) func() bool {
		return func() bool {
			return strings.Contains(s.getBody(t, "/metrics"), "ratelimit_sidecar_config_last_reload_successful "+v+"\n")
		}
	}
	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name       string
		breakRules func(t *testing.T)
		want       string
	}{
		{name: "rules deleted", breakRules: func(t *testing.T) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, want: "no rule files found"},
		{name: "bad edit", breakRules: func(t *testing.T) {
			write(t, path, strings.Replace(userRules, "hour", "fortnight", 1))
		}, want: `unknown unit "fortnight"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.breakRules(t)
			hup()
			waitFor(t, gauge("0"))
			if got := lastError(); !strings.Contains(got, tt.want) {
				t.Errorf("/debug/config last_error = %q, want it to say %q", got, tt.want)
			}
			resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0))
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("alice after the refused reload: %v, %v; want OVER_LIMIT from the rules in use", resp, err)
			}
			write(t, path, userRules)
			hup()
			waitFor(t, gauge("1"))
			if got := lastError(); got != "" {
				t.Errorf("/debug/config last_error = %q after the rules in use were put back, want none", got)
			}
		})
	}
}
