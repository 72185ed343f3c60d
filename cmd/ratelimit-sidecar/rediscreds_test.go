package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gcptest"
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
	s := startSidecarLog(t, &log, append(args, userArgs(userFile)...)...)

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

// TestRedisAuthFlagsRefused: credential flags that contradict each other
// are refused at start, naming the flags.
func TestRedisAuthFlagsRefused(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	write(t, pw, "x\n")
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"user twice", []string{"--redis-username", "a", "--redis-username-file", pw}, "--redis-username and --redis-username-file"},
		{"aws kind", []string{"--redis-aws-iam", "redis", "--redis-aws-cache-name", "c", "--redis-username", "u"}, `--redis-aws-iam: want elasticache, elasticache-serverless or memorydb, got "redis"`},
		{"aws no name", []string{"--redis-aws-iam", "memorydb", "--redis-username", "u"}, "--redis-aws-iam needs --redis-aws-cache-name"},
		{"aws no user", []string{"--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c"}, "--redis-aws-iam needs --redis-username"},
		{"aws and password", []string{"--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c", "--redis-username", "u", "--redis-password-file", pw}, "--redis-aws-iam signs the password itself"},
		{"aws lifetime", []string{"--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c", "--redis-username", "u", "--redis-conn-max-lifetime", "12h"}, "with --redis-aws-iam want 11h0m0s or less"},
		{"aws name alone", []string{"--redis-aws-cache-name", "c"}, "need --redis-aws-iam"},
		{"gcp and aws", []string{"--redis-gcp-iam", "--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c", "--redis-username", "u"}, "--redis-gcp-iam and --redis-aws-iam: set one"},
		{"gcp and user file", []string{"--redis-gcp-iam", "--redis-username-file", pw}, "--redis-gcp-iam and --redis-username-file"},
		{"gcp and password", []string{"--redis-gcp-iam", "--redis-password-file", pw}, "--redis-gcp-iam takes the access token as the password"},
		{"negative lifetime", []string{"--redis-conn-max-lifetime", "-1s"}, "--redis-conn-max-lifetime: want 0 (none) or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(append([]string{"--redis-url", "redis://127.0.0.1:1"}, tt.give...), noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRedisAWSIAM runs the sidecar with --redis-aws-iam, its AWS
// credentials from the environment (the SDK's default chain; instance
// metadata and config files off, so nothing leaves the machine). Redis
// checks no SigV4, so the ACL user takes any password (nopass): what is
// checked is that the sidecar's connections authenticate as the IAM
// user, that tokens are signed and counted, and that no token shows in
// the log.
func TestRedisAWSIAM(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "iam-user", "on", "nopass", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	env := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(env, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(env, "credentials"))
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	var log logtest.Buffer
	s := startSidecarLog(t, &log, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "5s",
		"--redis-username", "iam-user", "--redis-aws-iam", "elasticache", "--redis-aws-cache-name", "my-cache")
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("request: %v, %v\nlog:\n%s", resp.GetOverallCode(), err, log.String())
	}
	clients, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(clients, "user=iam-user"); n == 0 {
		t.Errorf("no connection authenticated as iam-user:\n%s", clients)
	}
	_, metrics := s.get(t, "/metrics")
	if strings.Contains(metrics, "ratelimit_sidecar_redis_credential_changes_total 0\n") || !strings.Contains(metrics, "ratelimit_sidecar_redis_credential_changes_total ") {
		t.Errorf("/metrics counts no signed token")
	}
	for _, secret := range []string{"X-Amz-Signature", "Action=connect"} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log shows the token (%s)", secret)
		}
	}
}

// TestRedisAWSIAMLifetime: with --redis-aws-iam connections are recycled
// after 11h unless --redis-conn-max-lifetime asks for less.
func TestRedisAWSIAMLifetime(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "credentials"))
	tests := []struct {
		give []string
		want time.Duration
	}{
		{nil, 11 * time.Hour},
		{[]string{"--redis-conn-max-lifetime", "1h"}, time.Hour},
	}
	for _, tt := range tests {
		args := append([]string{"--redis-url", "redis://127.0.0.1:1", "--redis-username", "u", "--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c"}, tt.give...)
		c, err := parseFlags(args, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		o := c.redis
		if _, err := redisCredentials(context.Background(), c, &o, zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		if o.ConnMaxLifetime != tt.want {
			t.Errorf("%v: ConnMaxLifetime %v, want %v", tt.give, o.ConnMaxLifetime, tt.want)
		}
	}
}

// TestRedisGCPIAM runs the sidecar with --redis-gcp-iam against a Redis
// whose default user's password is the access token that Google's
// credential chain gets (from a service account whose token endpoint is
// on loopback).
func TestRedisGCPIAM(t *testing.T) {
	ts := gcptest.NewTokenServer(t)
	ts.Setenv(t)
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "tok-1").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	var log logtest.Buffer
	s := startSidecarLog(t, &log, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "5s", "--redis-gcp-iam")
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("request: %v, %v\nlog:\n%s", resp.GetOverallCode(), err, log.String())
	}
	if strings.Contains(log.String(), "tok-1") {
		t.Error("the log shows the token")
	}
}

// TestRedisPasswordFileFixed: a sidecar started with a wrong password in
// its file is not ready; once the file holds the right one, the sidecar
// connects, with no restart.
func TestRedisPasswordFileFixed(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "right-pass").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	pwFile := filepath.Join(t.TempDir(), "password")
	write(t, pwFile, "wrong-pass\n")
	s := startSidecar(t, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--redis-password-file", pwFile)
	waitFor(t, func() bool {
		code, body := s.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "WRONGPASS")
	})
	tmp := pwFile + ".tmp"
	write(t, tmp, "right-pass\n")
	if err := os.Rename(tmp, pwFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		code, _ := s.get(t, "/readyz")
		return code == http.StatusOK
	})
	resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1))
	if err != nil || resp.Statuses[0].LimitRemaining != 2 {
		t.Errorf("request once the file is right: %v, %v; want 2 remaining, from Redis", resp, err)
	}
}
