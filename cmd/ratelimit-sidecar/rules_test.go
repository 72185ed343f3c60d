package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
