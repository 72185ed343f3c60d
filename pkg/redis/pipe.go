package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// pipe sends apply.lua calls that are made at the same time to Redis
// together. At most max round trips are out at once, unless Redis is far
// away (see adapt.go). A call made while fewer are out goes straight to
// Redis, so a quiet sidecar pays nothing for this. A call made while all
// are out waits, and the next round trip to end takes the waiting calls
// along, up to maxBatch, as one round trip. The calls of that round trip
// that share a mode and a clock (and, but on a Cluster master's pipe, a
// hash slot) are one apply.lua call,
// which decides them one after the other (see evalshaAll and the
// script): one write and one read for the lot instead of one each on
// the sidecar, and on Redis one script run, one TIME and one write per
// key instead of one each per request. No call waits for a timer, only
// for round trips already under way, except when Redis is far away, where
// a call waits at most a fraction of a round-trip time for others to go
// with (see adapt.go).
//
// The pipeline runs on the goroutine of one of its own calls, the one
// with the latest deadline, which the round trip that ended wakes to
// lead it: every waiting call is woken once anyway, so a batch costs no
// goroutine of its own, and since the pipeline is bounded by the latest
// deadline of its calls, its leader still returns by its own.
//
// On a Cluster there is one pipe per master, sending through that node's
// own client: go-redis's cluster pipeline answers only when every node
// has, and resends a node's whole batch, scripts that already ran
// included, on TRYAGAIN or a dropped connection. A node client never
// resends. A call that a node refuses with MOVED or ASK (the script did
// not run) goes to redirect, which sends it once more where the refusal
// points. An apply.lua call of several requests that a node refuses
// (see refusedRun) is never redirected whole: each of its requests goes
// again on its own, and is redirected by its own keys.
type pipe struct {
	rdb      goredis.UniversalClient
	max      int
	redirect func(ctx context.Context, keys []string, args []any, refusal error) ([]int64, error) // nil but on a Cluster
	// cross lets calls of different slots share an apply.lua call (a
	// Cluster master's pipe; see evalshaAll).
	cross bool

	// warmer runs the pipe's background work (see adapt.go); nil:
	// the pipe adds no round trips.
	warmer *warmer

	mu    sync.Mutex
	out   int     // round trips under way
	queue []*call // calls waiting for the next one
	// adapt is how the pipe adds round trips when Redis is far away;
	// p.mu guards it, but far.
	adapt adaptive
	// fast holds MODE_FAST back after a batch that did not fit.
	fast fastGate
}

// newPipe returns a pipe that sends through rdb, with at most max round
// trips out but those that it adds when Redis is far away (see
// adapt.go), whose connections w opens (nil: it adds none).
func newPipe(rdb goredis.UniversalClient, max int, w *warmer) *pipe {
	return &pipe{rdb: rdb, max: max, warmer: w, adapt: adaptive{pool: poolSize(rdb)}}
}

// maxBatch bounds the calls in one round trip, so that one round trip
// never carries more work than Redis can do within a request's deadline:
// at about 25 µs of Redis time per three-tier call, 128 calls take about
// 3 ms. Calls beyond it wait for the next round trip, and are dropped if
// their deadline passes meanwhile.
const maxBatch = 128

// do runs call c, whose arguments are set, within c.ctx, and recycles c.
// If c.ctx ends first, do returns its error; the call may still run on
// Redis, as any call whose reply is lost may. c.ctx's deadline bounds the
// call even when its Done channel does not close at it (see deadlineCtx).
func (p *pipe) do(c *call) ([]int64, error) {
	if c.span == nil {
		if span := trace.SpanFromContext(c.ctx); span.IsRecording() {
			return p.traced(c, span)
		}
	}
	p.mu.Lock()
	now := clock()
	if p.out < p.max {
		p.started(now)
		p.mu.Unlock()
		return p.alone(c, now)
	}
	if o := p.adapt.open; o != nil && len(o.batch.calls) < maxBatch {
		o.batch.calls = append(o.batch.calls, c)
		p.mu.Unlock()
		return p.wait(c, 0)
	}
	p.queue = append(p.queue, c)
	ok, flush := p.due(now)
	if !ok {
		if len(p.queue) > 1 {
			flush = 0 // the queue's first call flushes it
		}
		p.mu.Unlock()
		return p.wait(c, flush)
	}
	q := p.take()
	p.started(now)
	p.mu.Unlock()
	p.handOff(q, now)
	return p.wait(c, 0)
}

// alone sends c by itself, in a round trip that started at start, ends
// the round trip and recycles c.
func (p *pipe) alone(c *call, start time.Duration) ([]int64, error) {
	reply, err := p.one(c.ctx, c)
	putCall(c)
	p.pass(start)
	return reply, err
}

// one sends c by itself, within ctx (c.ctx, or one that ends with it):
// EVAL if Redis lost the script, and once more where a Cluster's
// redirection points.
func (p *pipe) one(ctx context.Context, c *call) ([]int64, error) {
	cmd := c.evalsha(ctx)
	_ = p.rdb.Process(ctx, cmd)
	reply, err := cmd.Result()
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = replyInts(applyScript.Eval(ctx, p.rdb, c.keys, c.args...).Result())
	}
	if p.redirected(err) {
		return p.redirect(ctx, c.keys, c.args, err)
	}
	return reply, err
}

// wait waits for queued call c's reply, or its turn to lead a batch, and
// recycles c. If flush is not 0, c heads the queue and, should the
// queue still wait then, tries at flush (on clock) to start a round trip
// for it (see adapt.go).
func (p *pipe) wait(c *call, flush time.Duration) ([]int64, error) {
	if c.span != nil {
		*c.span = spanFacts{queued: true} // unless it is sent
	}
	ctx := c.ctx
	deadline, bounded := ctx.Deadline()
	var expired <-chan time.Time
	arm := func() {
		if flush != 0 && (!bounded || epoch.Add(flush).Before(deadline)) {
			c.timer.Reset(flush - clock())
			expired = c.timer.C
			return
		}
		flush = 0
		if bounded {
			c.timer.Reset(time.Until(deadline))
			expired = c.timer.C
		} else {
			expired = nil
		}
	}
	arm()
	for woken := false; !woken; {
		select {
		case <-c.wake:
		case <-ctx.Done():
			if c.state.CompareAndSwap(waiting, abandoned) {
				return nil, ctx.Err() // c is the round trip's to recycle now
			}
			<-c.wake // claimed meanwhile: the answer, not a lost request
		case <-expired:
			if flush != 0 {
				flush = p.flush(c)
				arm()
				continue
			}
			if c.state.CompareAndSwap(waiting, abandoned) {
				return nil, context.DeadlineExceeded
			}
			<-c.wake
		}
		woken = true
	}
	if c.batch.leads {
		p.lead(c)
	}
	if c.span != nil {
		f := c.facts
		f.queued = true
		*c.span = f
	}
	reply, err := c.reply, c.err
	putCall(c)
	return reply, err
}

// flush starts a round trip for the queue if c still heads it and one is
// due (see due), and returns when to try again (0: not again).
func (p *pipe) flush(c *call) time.Duration {
	p.mu.Lock()
	if len(p.queue) == 0 || p.queue[0] != c {
		p.mu.Unlock()
		return 0 // taken
	}
	now := clock()
	ok, again := p.due(now)
	if !ok {
		p.mu.Unlock()
		return again
	}
	q := p.take()
	p.started(now)
	p.mu.Unlock()
	p.handOff(q, now)
	return 0
}

// pass ends the round trip that started at start. If calls are waiting,
// the round trip's place goes to a pipeline of them, which one of them is
// woken to send.
func (p *pipe) pass(start time.Duration) {
	p.mu.Lock()
	now := clock()
	p.ended(start, now)
	q := p.take()
	if len(q) == 0 {
		p.out--
		p.mu.Unlock()
		return
	}
	p.adapt.starts = append(p.adapt.starts, now)
	p.mu.Unlock()
	p.handOff(q, now)
}

// handOff wakes a call of q, taken from the queue for a round trip that
// p.out counts and that starts at start, to lead q as that round trip. If
// every caller of q gave up, the round trip goes to the calls queued
// since, or ends if there are none.
func (p *pipe) handOff(q []*call, start time.Duration) {
	for {
		if lead := claimLeader(q); lead != nil {
			lead.batch.leads, lead.batch.start = true, start
			if p.adapt.far.Load() {
				p.mu.Lock()
				lead.batch.calls, lead.batch.gathers, p.adapt.open = q, true, lead
				p.mu.Unlock()
			} else {
				lead.batch.calls = q
			}
			lead.wake <- struct{}{}
			return
		}
		for _, c := range q { // every call gave up
			putCall(c)
		}
		p.mu.Lock()
		p.ended(start, clock())
		q = p.take()
		if len(q) == 0 {
			p.out--
			p.mu.Unlock()
			return
		}
		start = clock()
		p.adapt.starts = append(p.adapt.starts, start)
		p.mu.Unlock()
	}
}

// take removes up to maxBatch calls from the head of the queue. p.mu must
// be held.
func (p *pipe) take() []*call {
	n := min(len(p.queue), maxBatch)
	q := p.queue[:n:n]
	p.queue = p.queue[n:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	return q
}

// deadlineCtx is its Context with deadline d, which is earlier than the
// Context's own, but without a timer: Done is the Context's and does not
// close at d, while Deadline and Err report d. That is enough for a Redis
// call, whose waits are all bounded by the deadline itself: go-redis and
// net.Dialer take socket deadlines from Deadline, a queued call arms its
// pooled timer with it, and a wait for a pooled connection is bounded by
// PoolTimeout, which client sets to Options.Timeout. context.WithTimeout
// would cost a timer, its Done channel and four allocations per request.
type deadlineCtx struct {
	context.Context
	d time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.d) {
		return context.DeadlineExceeded
	}
	return nil
}

// withDeadline returns ctx bounded by d: ctx itself if its deadline is no
// later, else a deadlineCtx.
func withDeadline(ctx context.Context, d time.Time) context.Context {
	if cur, ok := ctx.Deadline(); ok && !cur.After(d) {
		return ctx
	}
	return &deadlineCtx{Context: ctx, d: d}
}
