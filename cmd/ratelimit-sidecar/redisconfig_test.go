package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRedisWrongPassword runs the sidecar against a Redis that refuses
// its password: the refusal is logged once at Error with Redis's own
// message and the address, counted, and /readyz answers 503 with the
// reason although failure mode local could answer every request. Once
// Redis accepts the password, the sidecar connects, logs one Info line
// and is ready. Neither password ever shows in the log or on /readyz.
func TestRedisWrongPassword(t *testing.T) {
	const serverPass, sidecarPass = "srv-pass-7f3a", "car-pass-91bc"
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// The admin connection stays authenticated after this.
	if err := admin.ConfigSet(ctx, "requirepass", serverPass).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	pwFile := filepath.Join(t.TempDir(), "pw")
	write(t, pwFile, sidecarPass+"\n")
	var log logtest.Buffer
	s := startSidecar(t, sidecarOpts{log: &log, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--redis-password-file", pwFile}})

	var bodies []string
	waitReadyz := func(wantCode int, want string) {
		t.Helper()
		var code int
		var body string
		for range 500 { // 5 s
			code, body = s.get(t, "/readyz")
			bodies = append(bodies, body)
			if code == wantCode && strings.Contains(body, want) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("/readyz = %d %q; want %d with %q\nlog:\n%s", code, body, wantCode, want, log.String())
	}
	waitReadyz(http.StatusServiceUnavailable, "WRONGPASS")
	// Requests are still answered, by the failure mode.
	if resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 1)); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("request while Redis refuses the password: %v, %v; want OK from failure mode local", resp, err)
	}
	// Three refusals later, it is still logged once.
	refused := errorCount(t, admin, "WRONGPASS")
	waitFor(t, func() bool { return errorCount(t, admin, "WRONGPASS") >= refused+3 })
	errs := logLines(t, &log, "error", `"redis_message":"WRONGPASS`)
	if len(errs) != 1 || errs[0]["kind"] != "auth" {
		t.Fatalf("%d Error lines with Redis's WRONGPASS after 3 refusals, want 1 of kind auth:\n%s", len(errs), log.String())
	}
	if got := errs[0]["redis_addr"]; got != srv.Addr {
		t.Errorf("Error line's redis_addr = %v, want %s: %v", got, srv.Addr, errs[0])
	}
	metrics := s.getBody(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_redis_config_error{kind="auth"} 1`,
		`ratelimit_sidecar_redis_config_errors_total{kind="auth"} 1`,
		`ratelimit_sidecar_redis_config_error{kind="acl"} 0`,
		`ratelimit_sidecar_redis_config_error{kind="tls"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The operator gives Redis the sidecar's password.
	if err := admin.ConfigSet(ctx, "requirepass", sidecarPass).Err(); err != nil {
		t.Fatal(err)
	}
	waitReadyz(http.StatusOK, "ok\n")
	if oks := logLines(t, &log, "info", "redis authentication ok"); len(oks) != 1 || oks[0]["redis_addr"] != srv.Addr {
		t.Errorf("Info lines saying the authentication is ok: %v, want one naming %s", oks, srv.Addr)
	}
	metrics = s.getBody(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_redis_config_error{kind="auth"} 0`,
		`ratelimit_sidecar_redis_config_errors_total{kind="auth"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("after the fix, /metrics lacks %s", want)
		}
	}
	resp, err := s.rls.ShouldRateLimit(ctx, userRequest("bob", 1))
	if err != nil || resp.Statuses[0].LimitRemaining != 2 {
		t.Errorf("request after the fix: %v, %v; want 2 remaining", resp, err)
	}
	for _, pw := range []string{serverPass, sidecarPass} {
		if strings.Contains(log.String(), pw) {
			t.Errorf("the log holds a password:\n%s", log.String())
		}
		for _, b := range bodies {
			if strings.Contains(b, pw) {
				t.Errorf("/readyz holds a password: %q", b)
			}
		}
	}
}

// errorCount returns how many error replies of code (WRONGPASS, ...)
// Redis has sent (INFO errorstats).
func errorCount(t *testing.T, c *goredis.Client, code string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+code+":count="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO errorstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// logLines returns the JSON log lines in log at level that contain
// text.
func logLines(t *testing.T, log *logtest.Buffer, level, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(log.String(), "\n") {
		if line == "" || !strings.Contains(line, text) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}
