package main

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRedisURLHostPort: envoyproxy/ratelimit's REDIS_URL is host:port,
// and so is what people carry over into --redis-url. It is taken as
// redis://host:port. "redis:6379", the usual Service name, once parsed as
// a URL of scheme redis with no host, and connected to localhost.
func TestRedisURLHostPort(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"redis:6379", "redis://redis:6379"},
		{"127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"[::1]:6379", "redis://[::1]:6379"},
		{"redis.cache.svc.cluster.local:6380", "redis://redis.cache.svc.cluster.local:6380"},
		{"redis://r:6379/2", "redis://r:6379/2"},
		{"rediss://app:pw@r:6380", "rediss://app:pw@r:6380"},
		{"unix:///run/redis.sock", "unix:///run/redis.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			c, err := parseFlags([]string{"--redis-url", tt.give}, noEnv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.redis.URL != tt.want {
				t.Errorf("--redis-url %s: URL %q, want %q", tt.give, c.redis.URL, tt.want)
			}
			env := map[string]string{"RLS_REDIS_URL": tt.give}
			c, err = parseFlags(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if c.redis.URL != tt.want {
				t.Errorf("RLS_REDIS_URL=%s: URL %q, want %q", tt.give, c.redis.URL, tt.want)
			}
		})
	}
}

// TestRedisURLWithoutScheme: a value that has no scheme and is not
// host:port fails at once, in one line that says what to write, and does
// not repeat a password it may hold.
func TestRedisURLWithoutScheme(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"app:s3cret@redis:6379", "--redis-url: no scheme: want redis://[user[:password]@]host:port[/db], rediss:// for TLS, or unix:///path"},
		{"redis:port", "--redis-url: no scheme: want redis://"},
		{"/run/redis.sock", "--redis-url: no scheme: want redis://"},
		{"redis", "--redis-url: no scheme: want redis://"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := parseFlags([]string{"--redis-url", tt.give}, noEnv, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q: want one line, without the password", err)
			}
		})
	}
}

// TestRedisURLHostPortLogged: the start log says that host:port was taken
// as redis://host:port, once; a URL is not mentioned.
func TestRedisURLHostPortLogged(t *testing.T) {
	for _, tt := range []struct {
		give string
		want int
	}{{"redis:6379", 1}, {"redis://redis:6379", 0}} {
		c, err := parseFlags([]string{"--redis-url", tt.give}, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.InfoLevel)
		logEnv(zap.New(core), c)
		if n := logs.FilterMessageSnippet("taken as redis://host:port").FilterField(zap.String("redis_url", "redis://redis:6379")).Len(); n != tt.want {
			t.Errorf("--redis-url %s: %d log lines, want %d: %v", tt.give, n, tt.want, logs.All())
		}
	}
}
