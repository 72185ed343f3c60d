package redis

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Slot returns the hash slot of key, for tests.
func Slot(key string) uint16 { return slot("", key) }

// SlotWithPrefix returns the hash slot of prefix+key, for tests.
func SlotWithPrefix(prefix, key string) uint16 { return slot(prefix, key) }

// AddHook adds h to the store's go-redis client, for tests that watch what
// the store sends.
func AddHook(s *Store, h goredis.Hook) { s.rdb.AddHook(h) }

// Inflight returns how many round trips the store's pipe has out.
func Inflight(s *Store) int {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return s.pipe.out
}

// AddNodeHook adds h to every node client of the store's cluster client,
// present and future.
func AddNodeHook(s *Store, h goredis.Hook) {
	cc := s.rdb.(*goredis.ClusterClient)
	cc.OnNewNode(func(n *goredis.Client) { n.AddHook(h) })
	_ = cc.ForEachShard(context.Background(), func(_ context.Context, n *goredis.Client) error {
		n.AddHook(h)
		return nil
	})
}

// FullKey returns the Redis key of c in s.
func FullKey(s *Store, c limits.Check) string { return s.prefix + c.Key }

// NewNodePipe returns a pipe to node, which need not serve the keys sent
// through it, following redirections as the store does, and sending
// calls of several slots together as a master's pipe does.
func NewNodePipe(s *Store, node *goredis.Client, max int) *pipe {
	p := newPipe(node, max, s.warmer)
	p.redirect, p.cross = s.redirectApply, true
	return p
}

// ApplyVia decides b as Apply does on one slot, but through p.
func ApplyVia(ctx context.Context, s *Store, p *pipe, b *limits.Batch) error {
	b.Outcomes = make([]limits.Outcome, len(b.Checks))
	c := getCall(ctx)
	s.setArgs(c, b.Checks, nil, b.QuotaGroups, "", modeApply)
	c.slot = slot("", c.keys[0])
	reply, err := p.do(c)
	if err != nil {
		return wrap(ctx, "apply", err)
	}
	b.Admitted, err = readApply(reply, b.Outcomes, anyExtra(b.Checks, nil), anyRefund(b.Checks, nil))
	return err
}

// ApplyTogether decides bs, in order, as the pipes send requests that
// arrive together: on standalone Redis, one apply.lua call; on a Cluster,
// one per master, whose requests may be of several slots. Each request's
// keys must share a slot.
func ApplyTogether(ctx context.Context, s *Store, bs []*limits.Batch) error {
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	q := make([]*call, len(bs))
	var pipes []*pipe
	byPipe := map[*pipe][]*call{}
	for i, b := range bs {
		q[i] = getCall(ctx)
		s.setArgs(q[i], b.Checks, nil, b.QuotaGroups, now, modeApply)
		p := s.pipe
		if s.cc != nil {
			q[i].slot = slot("", q[i].keys[0])
			node, err := s.cc.MasterForKey(ctx, q[i].keys[0])
			if err != nil {
				return err
			}
			p = s.nodePipe(node)
		}
		if byPipe[p] == nil {
			pipes = append(pipes, p)
		}
		byPipe[p] = append(byPipe[p], q[i])
	}
	for _, p := range pipes {
		// One call, one mode: the pipe joins only calls of one mode, so a
		// call with refunds marks them all.
		for _, c := range byPipe[p] {
			if c.mode != modeApply {
				for _, o := range byPipe[p] {
					o.mode = c.mode
				}
				break
			}
		}
	}
	released := make([]bool, len(q))
	for i, c := range q {
		released[i] = strings.HasSuffix(c.mode, refundsMark)
	}
	for _, p := range pipes {
		p.send(byPipe[p][0], byPipe[p])
	}
	var errs []error
	for i, c := range q {
		<-c.wake
		b := bs[i]
		b.Outcomes = make([]limits.Outcome, len(b.Checks))
		err := c.err
		if err == nil {
			b.Admitted, err = readApply(c.reply, b.Outcomes, anyExtra(b.Checks, nil), released[i])
			refundsNotOver(b)
		}
		errs = append(errs, err)
		putCall(c)
	}
	return errors.Join(errs...)
}

// AlwaysFast makes the store's pipes try MODE_FAST on every batch that
// may go so, even after one that did not fit.
func AlwaysFast(s *Store) { s.pipe.fast.backoff = -1 }

// NeverFast makes the store's pipes send every batch in MODE_APPLY.
func NeverFast(s *Store) { s.pipe.fast.skip.Store(math.MaxInt32) }

// FastCounts returns how many batches the store's pipe sent in MODE_FAST
// that fast.lua decided, and how many it passed to apply.lua.
func FastCounts(s *Store) (fits, misses int64) {
	return s.pipe.fast.fits.Load(), s.pipe.fast.misses.Load()
}

// SetNear makes the standalone store's pipe take Redis as near, as a
// seed on a quiet machine does, for tests of what a near pipe sends: on
// a busy one the seed's PINGs can all take a millisecond.
func SetNear(s *Store) {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	s.pipe.adapt.rtt = rttMin{}
	s.pipe.adapt.rtt.add(50 * time.Microsecond)
	s.pipe.adapt.far.Store(false)
}

// ProbeEvery is how often a pipe whose calls wait PINGs to measure the RTT.
const ProbeEvery = probeEvery

// Ping (for tests) checks that Redis answers within the store's timeout: the master on
// standalone and Sentinel, every master on a Cluster. A Redis that
// answers may still refuse every write: Probe checks that too.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.rdb.Ping(ctx).Err()
	}
	if err != nil {
		return wrap(ctx, "ping", err)
	}
	return nil
}

// NodesDown (for tests) returns the addresses of the Cluster masters that are cut
// off now; nil elsewhere.
func (s *Store) NodesDown() []string {
	var down []string
	s.healths.Range(func(k, v any) bool {
		if v.(*nodeHealth).down.Load() {
			down = append(down, k.(string))
		}
		return true
	})
	return down
}

// ReplyBoundError is the error of a reply past the store's bounds.
type ReplyBoundError = replyBoundError

// Reply bounds, for tests.
const (
	MaxReplyBulk    = maxReplyBulk
	MaxReplyPending = maxReplyPending
	MaxReplyDepth   = maxReplyDepth
)
