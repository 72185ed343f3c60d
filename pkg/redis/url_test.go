package redis_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestHostPortURL: envoyproxy/ratelimit's REDIS_URL is host:port, and so
// is what people carry over into --redis-url. It is taken as
// redis://host:port. "redis:6379", the usual Service name, once parsed as
// a URL of scheme redis with no host, and connected to localhost.
func TestHostPortURL(t *testing.T) {
	tests := []struct {
		give, want   string
		wantHostPort bool
	}{
		{"redis:6379", "redis://redis:6379", true},
		{"127.0.0.1:6379", "redis://127.0.0.1:6379", true},
		{"[::1]:6379", "redis://[::1]:6379", true},
		{"redis.cache.svc.cluster.local:6380", "redis://redis.cache.svc.cluster.local:6380", true},
		{"redis://r:6379/2", "redis://r:6379/2", false},
		{"rediss://app:pw@r:6380", "rediss://app:pw@r:6380", false},
		{"unix:///run/redis.sock", "unix:///run/redis.sock", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, hostPort, err := redis.HostPortURL(tt.give)
			if err != nil || got != tt.want || hostPort != tt.wantHostPort {
				t.Errorf("HostPortURL(%q) = %q, %v, %v; want %q, %v", tt.give, got, hostPort, err, tt.want, tt.wantHostPort)
			}
		})
	}
}

// TestHostPortURLWithoutScheme: a value that has no scheme and is not
// host:port fails at once, in one line that says what to write, and does
// not repeat a password it may hold.
func TestHostPortURLWithoutScheme(t *testing.T) {
	const want = "--redis-url: no scheme: want redis://[user[:password]@]host:port[/db], rediss:// for TLS, or unix:///path"
	for _, give := range []string{"app:s3cret@redis:6379", "redis:port", "redis:0", "redis:65536", ":6379", "/run/redis.sock", "redis"} {
		t.Run(give, func(t *testing.T) {
			_, _, err := redis.HostPortURL(give)
			if !errors.Is(err, redis.ErrURLScheme) || err.Error() != want {
				t.Fatalf("err = %v, want %q", err, want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q: want one line, without the password", err)
			}
		})
	}
}
