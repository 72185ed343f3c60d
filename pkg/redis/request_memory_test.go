package redis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestMemoryPerRequestAtLimits sends one request as large as
// limits.DefaultRequestLimits allows (every descriptor, every value of
// the most bytes) through the engine and measures, with MEMORY USAGE, what
// it leaves in Redis, per algorithm and rule depth, for
// docs/bounds.md. The bound keeps it from growing unnoticed.
func TestMemoryPerRequestAtLimits(t *testing.T) {
	lim := limits.DefaultRequestLimits
	tests := []struct {
		name  string
		rules string
		depth int // entries per descriptor
		bound int64
	}{
		{name: "fixed_window", rules: "algorithm: fixed_window, unit: day, requests_per_unit: 1000", depth: 1, bound: 400 << 10},
		{name: "sliding_window", rules: "algorithm: sliding_window, unit: day, requests_per_unit: 1000", depth: 1, bound: 400 << 10},
		{name: "token_bucket", rules: "algorithm: token_bucket, unit: day, requests_per_unit: 1000", depth: 1, bound: 400 << 10},
		{name: "leaky_bucket", rules: "algorithm: leaky_bucket, unit: day, requests_per_unit: 1000", depth: 1, bound: 400 << 10},
		{name: "sliding_log", rules: "algorithm: sliding_log, unit: day, requests_per_unit: 1000", depth: 1, bound: 800 << 10},
		{name: "fixed_window_two_levels", rules: "algorithm: fixed_window, unit: day, requests_per_unit: 1000", depth: 2, bound: 800 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			rc := srv.Client(t)
			s := newStore(t, redis.Options{URL: urlOf(srv.Addr), KeyPrefix: redis.DefaultKeyPrefix})
			yaml := "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {" + tt.rules + "}\n"
			if tt.depth == 2 {
				yaml = "domain: edge\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: user\n        rate_limit: {" + tt.rules + "}\n"
			}
			e := limits.NewEngine(parseRules(t, yaml), s, limits.EngineOptions{})
			req := &limits.Request{Domain: "edge"}
			for i := range lim.MaxDescriptors {
				value := fmt.Sprintf("%s%04d", strings.Repeat("x", lim.MaxValueBytes-4), i)
				d := limits.Descriptor{Entries: []limits.Entry{{Key: "user", Value: value}}}
				if tt.depth == 2 {
					d.Entries = []limits.Entry{{Key: "tenant", Value: value}, {Key: "user", Value: value}}
				}
				req.Descriptors = append(req.Descriptors, d)
			}
			var d limits.Decision
			if err := e.Decide(context.Background(), req, &d); err != nil {
				t.Fatal(err)
			}
			if d.Code != limits.OK {
				t.Fatalf("code %v, want OK", d.Code)
			}
			ctx := context.Background()
			keys, err := rc.Keys(ctx, redis.DefaultKeyPrefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			var total, keyBytes int64
			for _, k := range keys {
				n, err := rc.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					t.Fatal(err)
				}
				total += n
				keyBytes += int64(len(k))
			}
			ttl, err := rc.PTTL(ctx, keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d keys of %d bytes of name in all: MEMORY USAGE %d bytes (%.1f KiB), %d per key; TTL of one %v",
				tt.name, len(keys), keyBytes, total, float64(total)/1024, total/int64(len(keys)), ttl)
			if total <= 0 || total > tt.bound {
				t.Errorf("%d bytes, want in (0, %d]", total, tt.bound)
			}
		})
	}
	// Envoy's per-request limit needs no rule: its key holds every entry
	// of the descriptor, up to MaxEntries keys and values of MaxValueBytes.
	t.Run("override_one_descriptor", func(t *testing.T) {
		srv := redistest.StartServer(t)
		rc := srv.Client(t)
		s := newStore(t, redis.Options{URL: urlOf(srv.Addr), KeyPrefix: redis.DefaultKeyPrefix})
		e := limits.NewEngine(parseRules(t, "domain: edge\ndescriptors: []\n"), s, limits.EngineOptions{})
		d := limits.Descriptor{Override: &limits.Override{Requests: 1, Unit: limits.UnitYear}}
		for i := range lim.MaxEntries {
			fill := strings.Repeat("x", lim.MaxValueBytes-4)
			d.Entries = append(d.Entries, limits.Entry{Key: fmt.Sprintf("%s%04d", fill, i), Value: fmt.Sprintf("%s%04d", fill, i)})
		}
		var dec limits.Decision
		if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{d}}, &dec); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		keys, err := rc.Keys(ctx, redis.DefaultKeyPrefix+"*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys: %d, %v; want 1", len(keys), err)
		}
		n, err := rc.MemoryUsage(ctx, keys[0], 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := rc.PTTL(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("override: 1 key of %d bytes of name: MEMORY USAGE %d bytes (%.1f KiB); TTL %v", len(keys[0]), n, float64(n)/1024, ttl)
		if n <= 0 || n > 400<<10 {
			t.Errorf("%d bytes, want in (0, %d]", n, 400<<10)
		}
	})
}
