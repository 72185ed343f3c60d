package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A pipe adds round trips beyond its max when Redis is far away. With
// max round trips out, a call waits for one of them to end and then for
// its own: up to two round-trip times, and on a link of 10 ms more than
// the store's timeout. So once the round-trip time (RTT) is at least
// adaptFrom, a call that finds max round trips out joins the batch of
// the newest round trip if that has not been sent yet; else it starts
// one more round trip at once, taking the queued calls along, if the
// newest under way started at least a gap ago (gap: RTT/16 + gapMin);
// else it queues. A queue is taken by the next round trip to end or the
// next call to find the gap passed, or else by its first call a gap
// after the newest round trip started, on that call's own pooled timer,
// the only one the pipe uses. A round trip's batch stays open until its
// leader sends it, and the leader yields once before sending, so that
// the callers of a batch just answered, who call again at once, go
// together in the next instead of the first going alone and the rest
// waiting a gap: a call waits about a gap at most, and seldom at all.
// Round trips start at most one per gap, so there are at most about 16
// out, and never more than maxAdaptive, nor more than the connections
// that warm has opened for them.
//
// Below adaptFrom nothing changes: the pipe batches as it always has,
// which is what keeps Redis's CPU per decision low on a nearby Redis. The
// RTT is that of a PING: three when the store starts (see seed), then one
// every probeEvery with traffic while calls find max round trips out (the
// only time the RTT decides anything) or Redis is far away (where the pipe
// adapts, and must follow the link). A pipe near Redis whose calls never
// wait, such as one serving RLQS grants or a light load, sends none: a
// thousand sidecars would otherwise send Redis 20,000 PINGs a second for
// nothing.
// The RTT is the shortest of the last rttWindow to 2×rttWindow PINGs. Not the round trips' own durations: a round trip that
// carried a large batch, or whose leader waited for a busy sidecar's
// scheduler, takes longer than the link does, and adding round trips
// would not shorten it.
const (
	// adaptFrom is the RTT from which a pipe adds round trips.
	adaptFrom = time.Millisecond
	// gapMin is the gap at the shortest RTT: gap = RTT/16 + gapMin.
	gapMin = 50 * time.Microsecond
	// maxAdaptive bounds the round trips a pipe has out when it adds
	// them, unless max is higher (or the pool smaller).
	maxAdaptive = 16
	// probeEvery is how often a pipe whose calls wait measures the RTT.
	probeEvery = 50 * time.Millisecond
	// rttWindow is the number of PINGs over which the shortest is the
	// RTT: it follows a change within 0.2 to 0.4 s.
	rttWindow = 4
	// warmEvery bounds how often a pipe opens connections (see warm),
	// so that a Redis that drops them does not get maxAdaptive PINGs at
	// every probe.
	warmEvery = 250 * time.Millisecond
)

// adaptive is a pipe's state for adding round trips beyond its max
// (see above). Its pipe's mu guards it, but far.
type adaptive struct {
	// pool is the size of the pipe's connection pool.
	pool   int
	starts []time.Duration // of the round trips under way, on clock
	// open is the leader of the round trip started last, while the
	// calls made meanwhile may still join its batch (see do), which
	// happens only while far is set: when Redis is far away.
	open *call
	far  atomic.Bool
	rtt  rttMin // the round-trip time of late
	// conns is the number of connections open when last counted (see
	// probe); warming is set while warm opens more, which it last began
	// at warmedAt; probing is set while probe measures the RTT, which it
	// last did at probedAt; waited is set when a call finds max round
	// trips out (see due), and cleared by probe.
	conns                    int
	warming, probing, waited bool
	warmedAt, probedAt       time.Duration
}

// epoch is the origin of clock.
var epoch = time.Now()

// clock returns the monotonic time since epoch.
func clock() time.Duration { return time.Since(epoch) }

// rttMin is the shortest of the last rttWindow to 2×rttWindow durations
// added: the shortest of the current window and the previous one. The
// zero value has seen none and reports 0.
type rttMin struct {
	cur, prev time.Duration
	n         int // durations in cur's window
}

func (m *rttMin) add(d time.Duration) {
	if m.n == 0 || d < m.cur {
		m.cur = d
	}
	m.n++
	if m.n == rttWindow {
		m.prev, m.cur, m.n = m.cur, 0, 0
	}
}

func (m *rttMin) get() time.Duration {
	switch {
	case m.n == 0:
		return m.prev
	case m.prev == 0:
		return m.cur
	}
	return min(m.cur, m.prev)
}

// gap returns the least time between the starts of round trips that the
// pipe adds beyond max, for an RTT of rtt.
func gap(rtt time.Duration) time.Duration { return rtt/16 + gapMin }

// due reports whether a call that found max round trips out may start
// one more at now; if not, when it may try again (0: it is to wait for a
// round trip to end instead). p.mu must be held.
func (p *pipe) due(now time.Duration) (bool, time.Duration) {
	p.adapt.waited = true
	rtt := p.adapt.rtt.get()
	if p.out >= p.adaptCap() || rtt < adaptFrom || len(p.adapt.starts) == 0 {
		return false, 0
	}
	newest := p.adapt.starts[0]
	for _, s := range p.adapt.starts[1:] {
		newest = max(newest, s)
	}
	at := max(now, newest+gap(rtt))
	if at == now {
		return true, 0
	}
	return false, at
}

// adaptCap returns the most round trips the pipe may have out while it
// adds them: maxAdaptive, or max if higher, but fewer than the
// connections open (see warm; one is left for probe), which a round trip
// can use without opening one within its deadline. p.mu must be held.
func (p *pipe) adaptCap() int {
	return max(p.max, min(maxAdaptive, p.adapt.conns-1))
}

// wantConns returns the connections the pipe keeps open while it adds
// round trips.
func (p *pipe) wantConns() int { return min(maxAdaptive+1, p.adapt.pool) }

// countConns returns the connections of the pipe's client that are open.
func (p *pipe) countConns() int { return int(p.rdb.PoolStats().TotalConns) }

// started records a round trip starting at now. p.mu must be held.
func (p *pipe) started(now time.Duration) {
	p.out++
	p.adapt.starts = append(p.adapt.starts, now)
}

// ended forgets the round trip that started at start and, if the RTT was
// last measured probeEvery ago and since then a call has waited or Redis
// is far away, measures it again. p.mu must be held.
func (p *pipe) ended(start, now time.Duration) {
	for i, s := range p.adapt.starts {
		if s == start {
			last := len(p.adapt.starts) - 1
			p.adapt.starts[i] = p.adapt.starts[last]
			p.adapt.starts = p.adapt.starts[:last]
			break
		}
	}
	if (p.adapt.waited || p.adapt.far.Load()) && !p.adapt.probing && (p.adapt.probedAt == 0 || now-p.adapt.probedAt >= probeEvery) {
		p.probe(now)
	}
}

// probe measures the RTT with a PING in the background, and records it
// (see measured). p.mu must be held.
func (p *pipe) probe(now time.Duration) {
	if p.warmer == nil {
		return
	}
	p.adapt.waited = false
	p.adapt.probing = p.warmer.do(func(ctx context.Context) {
		start := clock()
		err := p.rdb.Ping(ctx).Err()
		rtt := clock() - start
		conns := p.countConns()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.adapt.probing, p.adapt.probedAt, p.adapt.conns = false, now, conns
		if err == nil {
			p.measured(rtt)
		}
	})
}

// measured records an RTT measurement, and opens connections for the
// round trips the pipe may add if it is to add any. p.mu must be held.
func (p *pipe) measured(rtt time.Duration) {
	p.adapt.rtt.add(rtt)
	far := p.adapt.rtt.get() >= adaptFrom
	p.adapt.far.Store(far)
	if far && p.adapt.conns < p.wantConns() {
		p.warm()
	}
}

// warmer runs the background work of the pipes of one store (see probe,
// warm and pipe.behind), and owns its goroutines: close stops them and
// waits.
type warmer struct {
	mu     sync.Mutex
	closed bool
	stop   chan struct{} // closed by close
	wg     sync.WaitGroup
}

func newWarmer() *warmer { return &warmer{stop: make(chan struct{})} }

// do runs f in the background, within a context that ends after
// backstopTimeout or at close, and reports whether it did: not after
// close.
func (w *warmer) do(f func(ctx context.Context)) bool {
	return w.within(context.Background(), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, backstopTimeout)
		defer cancel()
		f(ctx)
	})
}

// within runs f in the background, within a context that ends with
// parent or at close, and reports whether it did: not after close.
func (w *warmer) within(parent context.Context, f func(ctx context.Context)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Go(func() {
		ctx, cancel := context.WithCancel(parent)
		var watch sync.WaitGroup
		watch.Go(func() {
			select {
			case <-w.stop:
				cancel()
			case <-ctx.Done():
			}
		})
		f(ctx)
		cancel()
		watch.Wait()
	})
	return true
}

// close stops the warmer's work and waits for it to end.
func (w *warmer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// warm makes sure, in the background, that the pipe's client has the
// connections of the round trips it may add open, unless it is making
// sure already or did within warmEvery: a connection opened within a
// request's deadline costs HELLO and go-redis's CLIENT SETINFO besides
// the TCP handshake, three round trips that a far Redis cannot fit in a
// request's, so the request would fail and its connection be dropped,
// again and again. It sends PINGs at once, bounded by backstopTimeout
// rather than a request's deadline, as many as there are idle
// connections and connections missing: each takes a connection of its
// own, and together with the round trips under way they hold no more
// than the pipe wants, so that they never keep a round trip waiting for
// the pool. p.mu must be held.
func (p *pipe) warm() {
	now := clock()
	if p.adapt.warming || p.warmer == nil || (p.adapt.warmedAt != 0 && now-p.adapt.warmedAt < warmEvery) {
		return
	}
	want := p.wantConns()
	p.adapt.warming = p.warmer.do(func(ctx context.Context) {
		st := p.rdb.PoolStats()
		if missing := want - int(st.TotalConns); missing > 0 {
			pings(ctx, p.rdb, missing+int(st.IdleConns))
		}
		conns := p.countConns()
		p.mu.Lock()
		p.adapt.conns, p.adapt.warming = conns, false
		p.mu.Unlock()
	})
	p.adapt.warmedAt = now
}

// pings sends n PINGs at once.
func pings(ctx context.Context, rdb goredis.UniversalClient, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()
}

// seedPings is the number of PINGs by which seed measures the RTT: one
// could be slow for a reason of the moment, such as a busy scheduler.
const seedPings = 3

// seed measures the RTT within ctx and, if Redis is far away, opens the
// connections of the round trips the pipe may add, so that a store that
// starts far from Redis adds them from its first requests on.
func (p *pipe) seed(ctx context.Context) {
	var rtt time.Duration
	for i := range seedPings {
		start := clock()
		if p.rdb.Ping(ctx).Err() != nil {
			return // the first requests will tell
		}
		if d := clock() - start; i == 0 || d < rtt {
			rtt = d
		}
	}
	p.mu.Lock()
	p.adapt.rtt.add(rtt)
	far := p.adapt.rtt.get() >= adaptFrom
	p.adapt.far.Store(far)
	p.adapt.probedAt = clock()
	p.mu.Unlock()
	if !far {
		return
	}
	pings(ctx, p.rdb, p.wantConns())
	conns := p.countConns()
	p.mu.Lock()
	p.adapt.conns, p.adapt.warmedAt = conns, clock()
	p.mu.Unlock()
}

// poolSize returns the size of rdb's connection pool, or maxAdaptive if
// it cannot tell.
func poolSize(rdb goredis.UniversalClient) int {
	if c, ok := rdb.(interface{ Options() *goredis.Options }); ok && c.Options().PoolSize > 0 {
		return c.Options().PoolSize
	}
	return maxAdaptive
}
