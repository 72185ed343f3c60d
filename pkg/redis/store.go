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
	"errors"
	"fmt"
	"strconv"
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

// Close closes the connections to Redis. Calls after Close fail.
func (s *Store) Close() error {
	s.probes.stop()
	s.warmer.close()
	return s.rdb.Close()
}

// Apply implements limits.Store. Its Redis calls end by the earlier of
// ctx's deadline and Options.Timeout, except a cross-slot refund, which
// gets a fresh Options.Timeout: abandoning it would waste the budgets it
// gives back.
//
// An error may leave hits consumed: a script that timed out on the client
// may still have run. That under-admits; it never over-admits.
func (s *Store) Apply(ctx context.Context, b *limits.Batch) error {
	err := s.apply(ctx, b)
	if err == nil {
		refundsNotOver(b)
	}
	return err
}

// refundsNotOver clears Over on b's refunds, which apply.lua checks for
// zero hits after giving them back: a refund is never refused
// (limits.Check.Refund), even where its limit has nothing left.
func refundsNotOver(b *limits.Batch) {
	for i := range b.Checks {
		if b.Checks[i].Refund {
			b.Outcomes[i].Over = false
		}
	}
}

func (s *Store) apply(ctx context.Context, b *limits.Batch) error {
	n := len(b.Checks)
	b.SizeOutcomes()
	b.Admitted = true
	if n == 0 {
		return nil
	}
	for i := range b.Checks {
		if l := b.Checks[i].Limit; l == nil || l.Window() <= 0 {
			return fmt.Errorf("redis apply: check %d has no limit with a window", i)
		}
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	// Bounded without a timer of its own (see deadlineCtx).
	rctx := withDeadline(ctx, time.Now().Add(s.timeout))
	if s.cc == nil {
		return s.applyAll(rctx, b, now, 0)
	}
	groups := s.groups(b.Checks)
	var err error
	if len(groups) == 1 {
		err = s.applyAll(rctx, b, now, groups[0].slot)
		groups[0].err = err
	} else {
		err = s.applyGroups(ctx, rctx, b, now, groups)
	}
	if err == nil || errors.Is(err, errNotRefunded) || !refusedWhole(groups) {
		return err // going again would count the hits not refunded twice
	}
	// A slot is migrating, and a group's keys are not all on one side of
	// it: some moved and some not, or some on neither yet. Redis refuses
	// a call of several keys on both sides until the migration ends,
	// before running it, but serves one key at a time where it is (ASK).
	// So the request goes again as one group per key, reserving and
	// refunding as a request across slots does. (The groups that had
	// reserved were refunded.)
	if split := s.byKey(b.Checks); len(split) > len(groups) {
		return s.applyGroups(ctx, rctx, b, now, split)
	}
	return err
}

// applyAll decides b in one script call; all its keys share a slot (on
// a Cluster; elsewhere slot is 0).
func (s *Store) applyAll(ctx context.Context, b *limits.Batch, now string, slot uint16) error {
	c := getCall(ctx)
	s.setArgs(c, b.Checks, nil, b.QuotaGroups, now, modeApply)
	reply, err := s.run(c, slot)
	if err != nil {
		return wrap(ctx, "apply", err)
	}
	b.Admitted, err = readApply(reply, b.Outcomes, anyExtra(b.Checks, nil), anyRefund(b.Checks, nil))
	return err
}

// run runs call c, whose keys share slot (as the caller's grouping
// computed it), through the pipe of the node that serves them, and
// recycles c.
func (s *Store) run(c *call, slot uint16) ([]int64, error) {
	if s.cc == nil {
		return s.pipe.do(c)
	}
	c.slot = slot
	node, err := s.cc.MasterForKey(c.ctx, c.keys[0])
	if err != nil {
		putCall(c)
		return nil, err
	}
	return s.runNode(node, c)
}
