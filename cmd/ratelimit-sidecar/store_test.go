package main

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRedisAuthFlagsRefused: credential flags that contradict each other
// are refused at start, naming the flags (the cases:
// internal/redisauth's TestOptionsRefused).
func TestRedisAuthFlagsRefused(t *testing.T) {
	_, err := parseFlags([]string{"--redis-url", "redis://127.0.0.1:1", "--redis-aws-iam", "memorydb", "--redis-aws-cache-name", "c"}, noEnv, io.Discard)
	if want := "--redis-aws-iam needs --redis-username"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

// TestRedisURLHostPort: --redis-url and RLS_REDIS_URL of host:port are
// taken as redis://host:port, and a value without a scheme that is not
// host:port is refused in one line (the cases: pkg/redis's
// TestHostPortURL).
func TestRedisURLHostPort(t *testing.T) {
	c, err := parseFlags([]string{"--redis-url", "redis:6379"}, noEnv, io.Discard)
	if err != nil || c.store.redis.URL != "redis://redis:6379" {
		t.Errorf("--redis-url redis:6379: URL %q, %v; want redis://redis:6379", c.store.redis.URL, err)
	}
	env := map[string]string{"RLS_REDIS_URL": "redis:6379"}
	c, err = parseFlags(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil || c.store.redis.URL != "redis://redis:6379" {
		t.Errorf("RLS_REDIS_URL=redis:6379: URL %q, %v; want redis://redis:6379", c.store.redis.URL, err)
	}
	_, err = parseFlags([]string{"--redis-url", "app:s3cret@redis:6379"}, noEnv, io.Discard)
	if want := "--redis-url: no scheme: want redis://"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("--redis-url app:s3cret@redis:6379: err = %v, want one containing %q, without the password", err, want)
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
		c.store.logURL(zap.New(core))
		if n := logs.FilterMessageSnippet("taken as redis://host:port").FilterField(zap.String("redis_url", "redis://redis:6379")).Len(); n != tt.want {
			t.Errorf("--redis-url %s: %d log lines, want %d: %v", tt.give, n, tt.want, logs.All())
		}
	}
}
