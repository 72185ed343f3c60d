package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestRedisOutageLogsOnce: through a Redis outage go-redis writes a
// message at every failed dial, and the sidecar logs the first of them
// at Warn, counting the rest in ratelimit_sidecar_redis_client_messages_total;
// once Redis answers again, the next outage is logged once more. It
// logged every one, about two a second.
func TestRedisOutageLogsOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	logs := &logtest.Buffer{}
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr}})
	s.code(t, "alice")
	lines := func() int { return strings.Count(logs.String(), `"msg":"go-redis"`) }
	const series = "ratelimit_sidecar_redis_client_messages_total"
	outage := func(wantLines int) {
		t.Helper()
		srv.Kill()
		before := max(metricValue(t, s, series), 0)
		// Calls, and the breaker's probes once it opens, dial Redis.
		deadline := time.Now().Add(15 * time.Second)
		for metricValue(t, s, series) < before+5 && lines() < wantLines+4 {
			if time.Now().After(deadline) {
				t.Fatalf("go-redis wrote %v messages in 15 s of outage, want 5", metricValue(t, s, series)-before)
			}
			s.code(t, "alice")
			time.Sleep(20 * time.Millisecond) // a poll, not a wait for the outcome
		}
		if got := lines(); got != wantLines {
			t.Errorf("%d go-redis lines logged, want %d:\n%s", got, wantLines, logs.String())
		}
	}
	outage(1)
	srv.Restart(t)
	waitFor(t, func() bool { s.code(t, "alice"); return metricValue(t, s, "ratelimit_sidecar_redis_circuit_open") == 0 })
	outage(2)
}
