package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// On a Cluster, each master has a circuit breaker of its own, so that one
// master failing costs only the requests whose keys it holds. The
// store's errors from a master wrap limits.ErrPartUnavailable, which the
// breaker in front of the whole store ignores. A master is cut off as
// that breaker opens (see store.Breaker): after nodeFailures failures in
// a row, where a failure counts only if its caller still waits and no
// other failure of the master was counted since it started. While cut
// off, a request with a key on it fails at once with ErrNodeDown (and
// takes the failure mode), and a goroutine probes the master every
// nodeCooldown until it takes a write again.
const (
	nodeFailures     = 5
	nodeCooldown     = 500 * time.Millisecond
	nodeProbeTimeout = 250 * time.Millisecond
	// nodeMinWait is store.BreakerOptions.MinWait's default.
	nodeMinWait = 5 * time.Millisecond
)

// ErrNodeDown is returned for a request with a key on a Cluster master
// that is cut off.
var ErrNodeDown = fmt.Errorf("redis cluster master cut off after failures: %w", limits.ErrPartUnavailable)

// nodeHealth is a Cluster master's breaker.
type nodeHealth struct {
	fails   atomic.Int64
	counted atomic.Uint64 // failures ever counted
	down    atomic.Bool
}

// nodeError is an unavailable error from one Cluster master.
type nodeError struct {
	addr string
	err  error
}

func (e *nodeError) Error() string   { return "master " + e.addr + ": " + e.err.Error() }
func (e *nodeError) Unwrap() []error { return []error{e.err, limits.ErrPartUnavailable} }

func (s *Store) health(addr string) *nodeHealth {
	if v, ok := s.healths.Load(addr); ok {
		return v.(*nodeHealth)
	}
	v, _ := s.healths.LoadOrStore(addr, new(nodeHealth))
	return v.(*nodeHealth)
}

// runNode runs call c through master node's pipe, unless the master is
// cut off, and recycles c.
func (s *Store) runNode(node *goredis.Client, c *call) ([]int64, error) {
	addr := node.Options().Addr
	h := s.health(addr)
	if h.down.Load() {
		putCall(c)
		return nil, fmt.Errorf("master %s: %w", addr, ErrNodeDown)
	}
	ctx := c.ctx // do recycles c
	seen := h.counted.Load()
	short := false
	if d, ok := callerCtx(ctx).Deadline(); ok {
		short = time.Until(d) < nodeMinWait
	}
	reply, err := s.nodePipe(node).do(c)
	if err == nil {
		h.fails.Store(0)
		return reply, nil
	}
	if !unavailable(err) {
		return nil, err
	}
	// A slot on the move (TRYAGAIN, or redirections past the one the
	// store follows) is the cluster resharding, not the master failing.
	_, moved := goredis.IsMovedError(err)
	_, ask := goredis.IsAskError(err)
	resharding := moved || ask || goredis.IsTryAgainError(err)
	if !resharding {
		// The master may have died and a replica taken its slots: learn
		// the layout again now rather than at go-redis's next periodic
		// reload, a minute away. go-redis runs one reload at a time, at
		// most five a second, however many calls fail.
		s.cc.ReloadState(ctx)
	}
	if !resharding && !limits.CallerGaveUp(callerCtx(ctx), short) && h.counted.CompareAndSwap(seen, seen+1) && h.fails.Add(1) >= nodeFailures {
		s.cutOff(addr, node, h)
	}
	return nil, &nodeError{addr: addr, err: err}
}

// callerCtx is the caller's context of a call made under ctx, Apply's
// context bounded by the store's timeout or not.
func callerCtx(ctx context.Context) context.Context {
	if dc, ok := ctx.(*deadlineCtx); ok {
		return dc.Context
	}
	return ctx
}

// cutOff cuts master addr off and probes it until it answers.
func (s *Store) cutOff(addr string, node *goredis.Client, h *nodeHealth) {
	if !h.down.CompareAndSwap(false, true) {
		return
	}
	if !s.probes.start(func(stop <-chan struct{}) { s.probeNode(stop, addr, node, h) }) {
		h.down.Store(false) // closed: nothing to probe for
	}
}

// probeNode probes master addr every nodeCooldown with the store's write
// probe (see Probe) until it answers, or until the cluster says it serves
// no slot any more (it failed over, or was resharded away), then lets
// requests reach it again.
func (s *Store) probeNode(stop <-chan struct{}, addr string, node *goredis.Client, h *nodeHealth) {
	t := time.NewTicker(nodeCooldown)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if v, ok := s.addrs.Load(addr); ok {
			node = v.(*goredis.Client) // go-redis may have replaced it
		}
		// While the master is cut off, its slots' requests go nowhere:
		// follow a promotion of its replica as soon as the cluster
		// announces it, by reloading the slot map at every probe.
		s.cc.ReloadState(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), nodeProbeTimeout)
		served, err := s.probeNodeOnce(ctx, node)
		cancel()
		if err == nil || !served {
			h.fails.Store(0)
			h.down.Store(false)
			return
		}
	}
}

func (s *Store) probeNodeOnce(ctx context.Context, node *goredis.Client) (served bool, _ error) {
	ranges, err := s.cc.ClusterSlots(ctx).Result()
	if err != nil {
		return true, err
	}
	return s.probeMaster(ctx, node, probeTags(ranges))
}

// probes owns the probe goroutines of the masters cut off. The zero
// value is ready to use.
type probes struct {
	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by stop; made by the first start
	wg     sync.WaitGroup
}

// start runs probe on a goroutine of its own until it returns or stop is
// called; it reports false, and runs nothing, after stop.
func (p *probes) start(probe func(stop <-chan struct{})) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.done == nil {
		p.done = make(chan struct{})
	}
	done := p.done
	p.wg.Go(func() { probe(done) })
	return true
}

// stop ends every probe and waits for them.
func (p *probes) stop() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.done != nil {
			close(p.done)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}
