package redis_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestTLSSkipHostnameVerification reaches a Redis whose certificate is
// for 127.0.0.1 by the name localhost: refused unless the host name check
// is skipped, and refused with it too when the certificate does not chain
// to the CA, since only the name is skipped, as envoyproxy/ratelimit's
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION does.
func TestTLSSkipHostnameVerification(t *testing.T) {
	dir, port, args := tlsFiles(t, "no")
	redistest.StartServer(t, redistest.WithArgs(args...))
	url := "rediss://" + net.JoinHostPort("localhost", strconv.Itoa(port))

	s := newStore(t, redis.Options{URL: url, TLS: redis.TLSOptions{CAFile: filepath.Join(dir, "ca.pem"), SkipHostnameVerification: true}})
	l := mustLimit(t, limits.FixedWindow, 2, limits.UnitHour, 1, 0)
	if b := apply(t, s, check("k", l, 1)); !b.Admitted {
		t.Errorf("skipping the host name: not admitted")
	}

	tests := []struct {
		name string
		give redis.TLSOptions
		want string
	}{
		{name: "name_checked", give: redis.TLSOptions{CAFile: filepath.Join(dir, "ca.pem")}, want: "localhost"},
		{name: "wrong_ca", give: redis.TLSOptions{CAFile: filepath.Join(dir, "other-ca.pem"), SkipHostnameVerification: true}, want: "unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := redis.New(ctx, redis.Options{URL: url, TLS: tt.give, Timeout: time.Second})
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v; want an error about %q", err, tt.want)
			}
		})
	}
}
