package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRedisPasswordFileRotates: the sidecar's password file is replaced
// (an atomic rename, as secret managers write) while requests run, the
// old password removed from the ACL user each time, and connections live
// a millisecond: no request fails (--failure-mode error would fail it),
// and the limit counts every request once.
func TestRedisPasswordFileRotates(t *testing.T) {
	tests := []struct {
		name string
		give func(userFile string) []string
	}{
		{"password file", func(string) []string { return []string{"--redis-username", "app"} }},
		{"user and password files", func(userFile string) []string { return []string{"--redis-username-file", userFile} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testPasswordFileRotates(t, tt.give) })
	}
}

func testPasswordFileRotates(t *testing.T, userArgs func(userFile string) []string) {
	const requests, workers, rotations = 400, 4, 3
	srv := redistest.StartServer(t)
	ctx := context.Background()
	// The default user takes a password too, so that a wrong user name
	// is refused rather than taken as the default user's.
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "admin-pw").Err(); err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr, Password: "admin-pw"})
	defer admin.Close()
	acl := func(rules ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "app"}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acl("on", ">pw0", "~*", "&*", "+@all")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", requests))
	secrets := t.TempDir()
	pwFile, userFile := filepath.Join(secrets, "password"), filepath.Join(secrets, "username")
	write(t, pwFile, "pw0\n")
	write(t, userFile, "app\n")
	var log logtest.Buffer
	args := []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--failure-mode", "error", "--redis-timeout", "5s",
		"--redis-password-file", pwFile, "--redis-conn-max-lifetime", "1ms"}
	s := startSidecar(t, sidecarOpts{log: &log, args: append(args, userArgs(userFile)...)})

	reached := make([]chan struct{}, rotations)
	for i := range reached {
		reached[i] = make(chan struct{})
	}
	var (
		mu     sync.Mutex
		failed []string
		made   int
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range requests / workers {
				resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1))
				mu.Lock()
				if err != nil {
					failed = append(failed, err.Error())
				} else if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					failed = append(failed, resp.OverallCode.String())
				}
				made++
				for i := range reached {
					if made == (i+1)*requests/(rotations+1) {
						close(reached[i])
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range rotations {
		<-reached[i]
		old, next := fmt.Sprintf("pw%d", i), fmt.Sprintf("pw%d", i+1)
		acl(">" + next)
		tmp := pwFile + ".tmp"
		write(t, tmp, next+"\n")
		if err := os.Rename(tmp, pwFile); err != nil {
			t.Fatal(err)
		}
		redistest.AwaitAuthenticated(t, admin)
		acl("<" + old)
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d of %d requests failed; first: %s\nlog:\n%s", len(failed), requests, failed[0], log.String())
	}
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("request %d of a limit of %d: %v, %v; want OVER_LIMIT", requests+1, requests, resp.GetOverallCode(), err)
	}
	_, metrics := s.get(t, "/metrics")
	for _, want := range []string{
		fmt.Sprintf("ratelimit_sidecar_redis_credential_changes_total %d", rotations),
		"ratelimit_sidecar_redis_credential_failures_total 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics has no %q", want)
		}
	}
	for _, pw := range []string{"pw0", "pw1", "pw2", "pw3"} {
		if strings.Contains(log.String(), pw) {
			t.Errorf("the log shows password %q", pw)
		}
	}
}
