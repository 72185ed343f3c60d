package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// requireRefused requires that both a decision and the probe fail as
// unavailable, with Redis's refusal code in the error: the state the
// probe exists for, where a PING still answers.
func requireRefused(t *testing.T, s *redis.Store, code string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v; the test needs a Redis that answers", err)
	}
	l := mustLimit(t, limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	b := &limits.Batch{Checks: []limits.Check{check("k", l, 1)}}
	if err := s.Apply(ctx, b); err == nil || !strings.Contains(err.Error(), code) {
		t.Fatalf("Apply: %v, want a %s refusal; the test does not set up what it means to", err, code)
	}
	err := s.Probe(ctx)
	if !errors.Is(err, limits.ErrStoreUnavailable) || !strings.Contains(err.Error(), code) {
		t.Errorf("Probe: %v, want an unavailable error with %s", err, code)
	}
}

// requireProbeOK requires the probe to succeed.
func requireProbeOK(t *testing.T, s *redis.Store, when string) {
	t.Helper()
	if err := s.Probe(context.Background()); err != nil {
		t.Errorf("Probe %s: %v", when, err)
	}
}

// TestProbeOOM: a Redis at maxmemory with noeviction answers PING but
// refuses writes with OOM, and the probe fails until memory is allowed
// again.
func TestProbeOOM(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	requireProbeOK(t, s, "before")
	ctx := context.Background()
	for i := range 16 {
		if err := rc.Set(ctx, fmt.Sprint("fill", i), strings.Repeat("x", 4096), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	configSet(t, rc, "maxmemory-policy", "noeviction", "maxmemory", "1")
	requireRefused(t, s, "OOM")
	configSet(t, rc, "maxmemory", "0")
	requireProbeOK(t, s, "with maxmemory lifted")
}

// TestProbeReadOnly: a master turned into a replica answers PING but
// refuses writes with READONLY, and the probe fails until it is a
// master again.
func TestProbeReadOnly(t *testing.T) {
	srv := redistest.StartServer(t)
	other := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	requireProbeOK(t, s, "before")
	host, port, _ := strings.Cut(other.Addr, ":")
	ctx := context.Background()
	if err := rc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitLinkUp(t, rc)
	requireRefused(t, s, "READONLY")
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	requireProbeOK(t, s, "as a master again")
}

// TestProbeNoReplicas: a master with min-replicas-to-write and too few
// replicas answers PING but refuses writes with NOREPLICAS.
func TestProbeNoReplicas(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	requireProbeOK(t, s, "before")
	configSet(t, rc, "min-replicas-to-write", "1")
	requireRefused(t, s, "NOREPLICAS")
	configSet(t, rc, "min-replicas-to-write", "0")
	requireProbeOK(t, s, "without min-replicas-to-write")
}

// TestProbeClusterEveryMaster: on a Cluster the probe writes to every
// master, so one master refusing writes fails it, whichever it is.
func TestProbeClusterEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := newStore(t, redis.Options{ClusterAddrs: cl.Addrs})
	requireProbeOK(t, s, "before")
	ctx := context.Background()
	for _, n := range cl.Nodes {
		t.Run(n.Addr, func(t *testing.T) {
			rc := n.Client(t)
			configSet(t, rc, "min-replicas-to-write", "1")
			err := s.Probe(ctx)
			configSet(t, rc, "min-replicas-to-write", "0")
			if !errors.Is(err, limits.ErrStoreUnavailable) || !strings.Contains(err.Error(), "NOREPLICAS") {
				t.Errorf("Probe with %s refusing writes: %v, want an unavailable error with NOREPLICAS", n.Addr, err)
			}
			requireProbeOK(t, s, "after")
		})
	}
}

// configSet sets Redis configuration parameters, name and value pairs.
func configSet(t *testing.T, rc *goredis.Client, kv ...string) {
	t.Helper()
	args := []any{"CONFIG", "SET"}
	for _, s := range kv {
		args = append(args, s)
	}
	if err := rc.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("CONFIG SET %v: %v", kv, err)
	}
}

// waitLinkUp waits, boundedly, for the replica rc to finish its sync.
func waitLinkUp(t *testing.T, rc *goredis.Client) {
	t.Helper()
	for range 500 {
		info, err := rc.Info(context.Background(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(10 * time.Millisecond) // a bounded poll of Redis, not a timed assertion
	}
	t.Fatal("replica not in sync")
}

// TestProbeReconnectsToAFarRedis: after an outage drops every pooled
// connection, a breaker's probe (250 ms, store.BreakerOptions's default)
// can open a new one to a Redis 10 ms away, though that takes longer than
// the store's 15 ms timeout. Bounded by that timeout, as it was, it never
// could, and the breaker stayed open.
func TestProbeReconnectsToAFarRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	p := startSlow(t, srv, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.New(ctx, redis.Options{URL: urlOf(p.Addr), Timeout: 15 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The outage: every connection to the server, the store's included,
	// is closed.
	if err := srv.Client(t).Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for range 20 { // the first ones may meet connections the kill closed
		pctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		err := s.Probe(pctx)
		cancel()
		if err == nil {
			return
		}
		errs = append(errs, err)
	}
	t.Fatalf("20 probes of 250 ms failed after the connections were dropped; the last: %v", errs[len(errs)-1])
}
