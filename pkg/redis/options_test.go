package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func TestOptionsInvalid(t *testing.T) {
	tests := []struct {
		name string
		give Options
		want string
	}{
		{name: "nothing", give: Options{}, want: "no Redis configured"},
		{name: "url_and_cluster", give: Options{URL: "redis://a:1", ClusterAddrs: []string{"b:1"}}, want: "more than one"},
		{name: "sentinel_without_addrs", give: Options{SentinelMaster: "m"}, want: "without sentinel addresses"},
		{name: "sentinel_without_master", give: Options{SentinelAddrs: []string{"a:1"}}, want: "without a master name"},
		{name: "brace_in_prefix", give: Options{URL: "redis://a:1", KeyPrefix: "rls:{x}:"}, want: "contains '{' or '}'"},
		{name: "negative_timeout", give: Options{URL: "redis://a:1", Timeout: -time.Second}, want: "negative timeout"},
		{name: "negative_pool", give: Options{URL: "redis://a:1", PoolSize: -1}, want: "negative pool size"},
		{name: "cert_without_key", give: Options{URL: "rediss://a:1", TLS: TLSOptions{CertFile: "c.pem"}}, want: "set together"},
		{name: "tls_files_without_tls", give: Options{URL: "redis://a:1", TLS: TLSOptions{CAFile: "ca.pem"}}, want: "TLS is off"},
		{name: "bad_scheme", give: Options{URL: "http://a:1"}, want: "invalid URL scheme"},
		{name: "bad_db", give: Options{URL: "redis://a:1/x"}, want: "invalid database number"},
		{name: "missing_ca", give: Options{URL: "rediss://a:1", TLS: TLSOptions{CAFile: "/nonexistent/ca.pem"}}, want: "read TLS CA file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(context.Background(), tt.give)
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if errors.Is(err, limits.ErrStoreUnavailable) {
				t.Errorf("error %q wraps ErrStoreUnavailable: a bad config is not an outage", err)
			}
		})
	}
}

func TestOptionsURLPasswordNotRepeated(t *testing.T) {
	_, err := New(context.Background(), Options{URL: "redis://user:s3cret@a b:1"})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v repeats the password", err)
	}
}
