package main

import (
	"io"
	"strings"
	"testing"
)

// TestFlagsInvalid: each flag's values out of range are refused at start,
// in one shape: the flag (or the variable) that is wrong, what it wants
// and what it got.
func TestFlagsInvalid(t *testing.T) {
	tlsPair := []string{"--grpc-tls-cert", "tls.crt", "--grpc-tls-key", "tls.key"}
	tests := []struct {
		give []string
		env  []string
		want string
	}{
		// Bounds of the servers (the rest: internal/bounds's TestServerCheck).
		{[]string{"--idle-timeout", "1ns"}, nil, "--idle-timeout: want 100ms or more, got 1ns"},
		// Bounded state.
		{[]string{"--metric-max-values", "-1"}, nil, "--metric-max-values: want 0 or more, got -1"},
		{[]string{"--override-keys", "own"}, nil, "override-keys"},
		// The garbage collector.
		{[]string{"--gc-percent", "0"}, nil, "--gc-percent"},
		{[]string{"--memory-limit", "64MB"}, nil, "--memory-limit"},
		{[]string{"--memory-limit", "-1"}, nil, "--memory-limit"},
		{[]string{"--memory-limit", "99999999TiB"}, nil, "--memory-limit"},
		{[]string{"--memory-limit", "1"}, nil, "--memory-limit: want 0 (none) or 16MiB or more"},
		{[]string{"--memory-limit", "15MiB"}, nil, "--memory-limit: want 0 (none) or 16MiB or more"},
		// TLS (the rest: internal/grpctls).
		{append([]string{"--grpc-tls-min-version", "1.1"}, tlsPair...), nil, `--grpc-tls-min-version: want 1.2 or 1.3, got "1.1"`},
		// Tracing (the rest: internal/tracing).
		{[]string{"--tracing"}, []string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL: want grpc or http/protobuf, got "http/json"`},
		// Requests, the memory store, the decision's numbers, Redis.
		{[]string{"--max-descriptors", "0"}, nil, "--max-descriptors: want 1 or more, got 0"},
		{[]string{"--max-entries", "-1"}, nil, "--max-entries: want 1 or more, got -1"},
		{[]string{"--max-value-bytes", "0"}, nil, "--max-value-bytes: want 1 or more, got 0"},
		{[]string{"--max-hits-addend", "0"}, nil, "--max-hits-addend: want 1 to 4503599627370496 (2^52, so that counters in debt stay exact), got 0"},
		{[]string{"--max-hits-addend", "4503599627370497"}, nil, "--max-hits-addend: want 1 to 4503599627370496 (2^52, so that counters in debt stay exact), got 4503599627370497"},
		{[]string{"--memory-max-keys", "0"}, nil, "--memory-max-keys: want 1 or more, got 0"},
		{[]string{"--deny-cache-entries", "-1"}, nil, "--deny-cache-entries: want 0 (off) or more, got -1"},
		{[]string{"--near-limit-ratio", "2"}, nil, "--near-limit-ratio: want a number above 0 and at most 1, got 2"},
		{[]string{"--log-format", "xml"}, nil, `--log-format: want json or console, got "xml"`},
		{[]string{"--failure-mode", "shut"}, nil, `invalid value "shut" for flag -failure-mode: unknown failure mode "shut"`},
		{nil, []string{"RLS_FAILURE_MODE=shut"}, `RLS_FAILURE_MODE: unknown failure mode "shut"`},
		{[]string{"--redis-pool-size", "-1"}, nil, "--redis-pool-size: want 0 (go-redis's default) to 1000 connections per Redis node, got -1"},
		{[]string{"--redis-timeout", "1ns"}, nil, "--redis-timeout: want 1ms or more, got 1ns"},
		// RLQS.
		{[]string{"--rlqs-bucket-ttl", "1500ms"}, nil, "--rlqs-bucket-ttl: want whole seconds, at least 1s (Envoy reads an assignment's time to live in whole seconds), got 1.5s"},
		// The rejection log (the rest: internal/rejectlog).
		{[]string{"--log-rejections", "warn"}, nil, "--log-rejections: want off, debug or info"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append(tt.give, tt.env...), " "), func(t *testing.T) {
			_, err := parseFlags(tt.give, lookupIn(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
}
