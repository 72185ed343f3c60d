// Package redis is the limits.Store through which sidecars share limits in
// Redis: standalone, Sentinel or Cluster.
//
// One Lua script, scripts/apply.lua, decides all the checks of a request
// at once. It mirrors limits.Limit.Evaluate and reads the time with
// redis.call('TIME'), so no sidecar's clock matters, and it writes nothing
// unless every enforced limit admits the request. On standalone Redis and
// Sentinel a request is decided by exactly one EVALSHA (EVAL once after
// Redis lost its script cache), which may decide other requests of the
// same round trip too. On a Cluster the checks are grouped by hash slot: one
// group is one EVALSHA, and several run in parallel, each reserving
// atomically; if any group rejects the request, the groups that reserved
// are refunded by scripts/refund.lua, so the request stays all-or-nothing.
// While a refund is under way the reserved hits count against other
// requests, which can under-admit for that moment but never over-admit.
// A call that a migrating slot refuses whole (TRYAGAIN: its keys on both
// sides, or some on neither) goes again the same way, one group per key.
//
// Requests made while Options.MaxInflight calls are already out (to the
// node, on a Cluster) wait for the next to end and go together (see
// pipe): those that go to one node as one apply.lua call (on a Cluster,
// whatever their slots), which decides them one after the other, so a
// busy sidecar makes one write and one read per batch instead of per
// request, and Redis one script run. When Redis is a millisecond or more
// away, the store adds round trips beyond MaxInflight, so that a request
// does not wait for another's round trip (see adapt.go).
//
// Keys are Options.KeyPrefix followed by the key of limits.AppendKey; a
// sliding log keeps a second key, the same followed by ":h". Every key
// has a TTL that matches its algorithm, so memory stays bounded however
// many distinct descriptors appear.
//
// Errors that mean Redis is unreachable, too slow or not serving wrap
// limits.ErrStoreUnavailable.
package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Store is a limits.Store in Redis. It is safe for concurrent use. Create
// it with New and release it with Close.
type Store struct {
	rdb      goredis.UniversalClient
	pipe     *pipe                  // nil on a Cluster
	cc       *goredis.ClusterClient // nil but on a Cluster
	nodes    sync.Map               // on a Cluster: master address → *pipe
	healths  sync.Map               // on a Cluster: master address → *nodeHealth
	probes   probes                 // of the masters cut off (see nodes.go)
	addrs    sync.Map               // on a Cluster: node address → *goredis.Client
	inflight int
	warmer   *warmer
	prefix   string
	timeout  time.Duration
	now      func() time.Time // nil: Redis's clock
}

var _ limits.Store = (*Store)(nil)

// New connects to the Redis that o describes and loads the scripts, so
// the first request is already an EVALSHA. An error from reaching Redis
// wraps limits.ErrStoreUnavailable; an invalid o does not. New is not
// bound by Options.Timeout, only by ctx (and a one-second bound on each
// socket read or write): give ctx a deadline.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	rdb, err := o.client()
	if err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	s := &Store{rdb: rdb, prefix: o.prefix(), timeout: o.timeout(), inflight: o.maxInflight(), warmer: newWarmer(), now: o.Now}
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		// Before the first command, so that every node is seen.
		s.cc = cc
		cc.OnNewNode(func(n *goredis.Client) { s.addrs.Store(n.Options().Addr, n) })
	} else {
		s.pipe = newPipe(rdb, s.inflight, s.warmer)
	}
	for _, sc := range []*goredis.Script{applyScript, refundScript, probeScript} {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			_ = rdb.Close()
			return nil, wrap(ctx, "load scripts", err)
		}
	}
	if s.pipe != nil {
		s.pipe.seed(ctx)
	}
	return s, nil
}

// Close closes the connections to Redis. Calls after Close fail. It
// first ends the store's background work and waits for it, the calls
// that a Cluster node refused and that go again on their own included
// (each bounded by its request's deadline).
func (s *Store) Close() error {
	s.probes.stop()
	s.warmer.close()
	return s.rdb.Close()
}
