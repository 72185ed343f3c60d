package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsdtest"
)

const statsdRules = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestStatsdReferenceDefault: run as ratelimit with the reference's
// default environment, which sends statsd (USE_STATSD is true by
// default) over TCP to STATSD_HOST:STATSD_PORT, a statsd_exporter there
// with Envoy Gateway's mapping keeps the series it had from the
// reference.
func TestStatsdReferenceDefault(t *testing.T) {
	mapping, err := os.ReadFile("../../internal/statsd/testdata/envoy-gateway-statsd_conf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rcv := statsdtest.Start(t, "tcp", string(mapping), false)
	host, port, _ := net.SplitHostPort(rcv.Addr)
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "config", "rules.yaml"), statsdRules)
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: map[string]string{
		"RUNTIME_ROOT": dir, "RUNTIME_WATCH_ROOT": "false", "STATSD_HOST": host, "STATSD_PORT": port, "STATS_FLUSH_INTERVAL": "50ms",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}, args: []string{"--redis-url="}})
	for range 3 {
		if _, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 0)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		"ratelimit_service_rate_limit_total_hits":   3,
		"ratelimit_service_rate_limit_within_limit": 2,
		"ratelimit_service_rate_limit_over_limit":   1,
	}
	user := map[string]string{"domain": "edge", "key1": "user"}
	ok := rcv.Wait(30*time.Second, func() bool {
		for name, v := range want {
			if got, _ := rcv.Value(name, user); got != v {
				return false
			}
		}
		got, _ := rcv.Value("ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"})
		return got == 3
	})
	if !ok {
		t.Fatalf("statsd_exporter's series %q; lines %q", rcv.Names(), rcv.Lines())
	}
	if errs := rcv.SampleErrors(); len(errs) > 0 {
		t.Errorf("statsd_exporter refused samples: %v", errs)
	}
}

// TestDogStatsDReferenceEnv: run as ratelimit with the reference's
// DogStatsD settings (USE_DOG_STATSD, EXTRA_TAGS, a mogrifier) and
// Datadog's DD_ENV, a DogStatsD receiver gets the stats tagged as the
// reference's client tags them.
func TestDogStatsDReferenceEnv(t *testing.T) {
	rcv := statsdtest.Start(t, "udp", "", true)
	host, port, _ := net.SplitHostPort(rcv.Addr)
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "config", "rules.yaml"), statsdRules)
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: map[string]string{
		"RUNTIME_ROOT": dir, "RUNTIME_WATCH_ROOT": "false", "USE_STATSD": "false", "USE_DOG_STATSD": "true",
		"STATSD_HOST": host, "STATSD_PORT": port, "STATS_FLUSH_INTERVAL": "50ms", "EXTRA_TAGS": "cluster:eu-west",
		"USE_DOG_STATSD_MOGRIFIERS":         "hits",
		"DOG_STATSD_MOGRIFIER_HITS_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
		"DOG_STATSD_MOGRIFIER_HITS_NAME":    "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_HITS_TAGS":    "domain:$1,descriptor:$2",
		"DD_ENV":                            "prod",
		"HOST":                              "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}, args: []string{"--redis-url="}})
	for range 3 {
		if _, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 0)); err != nil {
			t.Fatal(err)
		}
	}
	tags := map[string]string{"env": "prod", "cluster": "eu-west", "domain": "edge", "descriptor": "user"}
	ok := rcv.Wait(30*time.Second, func() bool {
		hits, _ := rcv.Value("ratelimit_service_rate_limit_total_hits", tags)
		over, _ := rcv.Value("ratelimit_service_rate_limit_over_limit", tags)
		return hits == 3 && over == 1
	})
	if !ok {
		t.Fatalf("no tagged total_hits 3 and over_limit 1: series %q, lines %q", rcv.Names(), rcv.Lines())
	}
	if errs := rcv.SampleErrors(); len(errs) > 0 {
		t.Errorf("refused samples: %v", errs)
	}
}
