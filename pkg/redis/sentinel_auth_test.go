package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestSentinelPassword: sentinels that require a password are reached with
// SentinelPassword, and refused without it.
func TestSentinelPassword(t *testing.T) {
	s := redistest.StartSentinel(t)
	for _, addr := range s.SentinelAddrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		err := c.Do(context.Background(), "ACL", "SETUSER", "default", "on", ">sentinel-secret", "~*", "&*", "+@all").Err()
		c.Close()
		if err != nil {
			t.Fatalf("set the sentinel's password: %v", err)
		}
	}
	opts := redis.Options{SentinelMaster: s.MasterName, SentinelAddrs: s.SentinelAddrs, KeyPrefix: newPrefix(t), Timeout: testTimeout}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := redis.New(ctx, opts); err == nil {
		st.Close()
		t.Fatal("New without the sentinels' password succeeded")
	} else if !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("New without the password: %v, want an unavailable error", err)
	}

	opts.SentinelPassword = "sentinel-secret"
	st := newStore(t, opts)
	l, err := limits.NewLimit(limits.FixedWindow, 1, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}
	if err := st.Apply(context.Background(), b); err != nil || !b.Admitted {
		t.Errorf("Apply with the sentinels' password: admitted %v, %v", b.Admitted, err)
	}
}
