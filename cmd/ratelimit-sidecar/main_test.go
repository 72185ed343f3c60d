package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gctune"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// repoRoot is the repository's root, seen from this package.
const repoRoot = "../.."

func TestInvalidConfigListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
	write(t, filepath.Join(dir, "b.yaml"), "domain: b\ndescriptors:\n  - value: v\n    colour: blue\n")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard, &stderr)
	if err == nil {
		t.Fatal("run succeeded with an invalid config")
	}
	for _, want := range []string{
		filepath.Join(dir, "a.yaml") + `:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`,
		filepath.Join(dir, "b.yaml") + ":4: descriptors[0].colour: unknown field",
		filepath.Join(dir, "b.yaml") + ":3: descriptors[0].key: required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
}

func TestServesUntilCancelled(t *testing.T) {
	s := startSidecar(t, sidecarOpts{args: []string{"--config", "../../config/"}})
	ctx := context.Background()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		h, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health(%q) = %v, %v; want SERVING", svc, h, err)
		}
	}
	resp, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "edge",
		HitsAddend:  10,
		Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}, {Key: "user", Value: "u1"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
		t.Errorf("first burst of 10 = %v, want OK with 0 remaining (config/rules.yaml user burst is 10)", resp)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := s.get(t, path); code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, code)
		}
	}
	if err := s.stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	env := map[string]string{"RLS_GRPC_ADDR": "127.0.0.1:9999", "RLS_MERGE_DOMAINS": "true", "RLS_HTTP_ADDR": "127.0.0.1:1"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := parseFlags([]string{"--http-addr", "127.0.0.1:2"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addrs.grpc != "127.0.0.1:9999" || !c.rules.config.MergeDomains {
		t.Errorf("environment not applied: grpc %q merge %v", c.addrs.grpc, c.rules.config.MergeDomains)
	}
	if c.addrs.http != "127.0.0.1:2" {
		t.Errorf("http addr = %q, want the flag to win over RLS_HTTP_ADDR", c.addrs.http)
	}
	env["RLS_MAX_HITS_ADDEND"] = "lots"
	if _, err := parseFlags(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "RLS_MAX_HITS_ADDEND") {
		t.Errorf("bad environment value: err = %v, want one naming RLS_MAX_HITS_ADDEND", err)
	}
}

// TestIncompleteRedisFlags checks that a Redis flag naming only part of a
// topology fails at startup: --redis-sentinel-addrs without
// --redis-sentinel-master once ran on the memory store without a word.
func TestIncompleteRedisFlags(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--redis-sentinel-addrs", "127.0.0.1:26379"}, "sentinel addresses without a master name"},
		{[]string{"--redis-sentinel-master", "mymaster"}, "sentinel master name without sentinel addresses"},
		{[]string{"--redis-url", "redis://127.0.0.1:6379", "--redis-cluster-addrs", "127.0.0.1:7000"}, "more than one of"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			_, err := parseFlags(tt.give, noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--redis-sentinel-master") {
				t.Errorf("err = %v; want one naming the redis flags and saying %q", err, tt.want)
			}
		})
	}
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if b := chooseBackend(c.store); b.name != "memory" {
		t.Errorf("no Redis flags: backend %q, want memory", b.name)
	}
	c, err = parseFlags([]string{"--redis-sentinel-addrs", "127.0.0.1:26379", "--redis-sentinel-master", "m"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if b := chooseBackend(c.store); b.name != "redis" {
		t.Errorf("sentinel flags: backend %q, want redis", b.name)
	}
}

func noEnv(string) (string, bool) { return "", false }

func write(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGCFlags checks the garbage-collector flags: their defaults, sizes
// in GOMEMLIMIT's syntax, and that GOGC and GOMEMLIMIT, which the runtime
// has already applied, make the sidecar leave its setting alone.
func TestGCFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
		env  map[string]string
		want gctune.Settings
	}{
		{name: "defaults", want: gctune.Settings{Percent: 400, SetPercent: true, Limit: 64 << 20, SetLimit: true}},
		{name: "flags", give: []string{"--gc-percent", "150", "--memory-limit", "1GiB"}, want: gctune.Settings{Percent: 150, SetPercent: true, Limit: 1 << 30, SetLimit: true}},
		{name: "no_limit", give: []string{"--memory-limit", "0"}, want: gctune.Settings{Percent: 400, SetPercent: true, SetLimit: true}},
		{name: "bytes", give: []string{"--memory-limit", "100000000"}, want: gctune.Settings{Percent: 400, SetPercent: true, Limit: 100000000, SetLimit: true}},
		{name: "go_env", env: map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}, want: gctune.Settings{Percent: 400, Limit: 64 << 20}},
		{name: "rls_env", env: map[string]string{"RLS_GC_PERCENT": "200", "RLS_MEMORY_LIMIT": "32MiB"}, want: gctune.Settings{Percent: 200, SetPercent: true, Limit: 32 << 20, SetLimit: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			c, err := parseFlags(tt.give, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.gc != tt.want {
				t.Errorf("gc = %+v, want %+v", c.gc, tt.want)
			}
		})
	}
}
