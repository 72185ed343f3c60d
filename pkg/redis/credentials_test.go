package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// creds is a redis.Credentials whose password a test sets.
type creds struct {
	mu         sync.Mutex
	user, pass string
	asked      int
}

func (c *creds) Credentials(context.Context) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	return c.user, c.pass, nil
}

func (c *creds) set(pass string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pass = pass
}

// TestCredentialsPerConnection: each new connection asks Credentials,
// over the URL's password; with ConnMaxLifetime every call here opens
// one. A password Redis no longer takes fails the call with Redis's own
// WRONGPASS (not as a bad reply), and the next password is taken at once.
func TestCredentialsPerConnection(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Client(t)
	ctx := context.Background()
	setUser := func(pass string) {
		t.Helper()
		if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", "resetpass", ">"+pass, "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	setUser("one")
	c := &creds{user: "app", pass: "one"}
	st := newStore(t, redis.Options{URL: "redis://app:stale@" + s.Addr, Credentials: c, ConnMaxLifetime: time.Nanosecond})
	l, err := limits.NewLimit(limits.FixedWindow, 100, limits.UnitHour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	apply := func() error {
		b := &limits.Batch{Checks: []limits.Check{{Key: "{k}creds", Limit: l, Hits: 1}}}
		err := st.Apply(ctx, b)
		if err == nil && !b.Admitted {
			return errors.New("not admitted")
		}
		return err
	}
	if err := apply(); err != nil {
		t.Fatalf("Apply with the first password: %v", err)
	}
	setUser("two")
	// Calls at once, so that some wait for a round trip and go together
	// in one pipeline, whose connection fails as the lone call's does.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			for range 8 {
				errs <- apply()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("Apply once Redis refuses the password: %v, want Redis's WRONGPASS", err)
			break
		}
	}
	c.set("two")
	if err := apply(); err != nil {
		t.Errorf("Apply with the second password: %v", err)
	}
}

// TestSentinelCredentials: sentinels that require a password are reached
// with SentinelCredentials, and the master with Credentials.
func TestSentinelCredentials(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	for _, addr := range s.SentinelAddrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		err := c.Do(ctx, "ACL", "SETUSER", "default", "on", ">sentinel-secret", "~*", "&*", "+@all").Err()
		c.Close()
		if err != nil {
			t.Fatalf("set the sentinel's password: %v", err)
		}
	}
	if err := s.Master.Client(t).Do(ctx, "ACL", "SETUSER", "app", "on", ">node-secret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	sc := &creds{pass: "sentinel-secret"}
	nc := &creds{user: "app", pass: "node-secret"}
	st := newStore(t, redis.Options{SentinelMaster: s.MasterName, SentinelAddrs: s.SentinelAddrs, Credentials: nc, SentinelCredentials: sc})
	l, err := limits.NewLimit(limits.FixedWindow, 1, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}
	if err := st.Apply(ctx, b); err != nil || !b.Admitted {
		t.Errorf("Apply: admitted %v, %v", b.Admitted, err)
	}
	for name, c := range map[string]*creds{"sentinel": sc, "node": nc} {
		c.mu.Lock()
		if c.asked == 0 {
			t.Errorf("%s credentials never asked for", name)
		}
		c.mu.Unlock()
	}
}
