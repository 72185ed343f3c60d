package redis

import (
	"context"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// pipe sends apply.lua calls that are made at the same time to Redis
// together. At most max round trips are out at once. A call made while
// fewer are out goes straight to Redis, so a quiet sidecar pays nothing
// for this. A call made while all are out waits, and the next round trip
// to end takes the waiting calls along, up to maxBatch, as one pipeline:
// one write and one read for the lot instead of one each, on the sidecar
// and on Redis. No call waits for a timer, only for round trips already
// under way.
//
// On a Cluster there is one pipe per master, sending through that node's
// own client: go-redis's cluster pipeline answers only when every node
// has, and resends a node's whole batch, scripts that already ran
// included, on TRYAGAIN or a dropped connection. A node client never
// resends. A call that a node refuses with MOVED or ASK (the script did
// not run) goes to redirect, which sends it once more where the refusal
// points.
type pipe struct {
	rdb      goredis.UniversalClient
	max      int
	redirect func(ctx context.Context, keys []string, args []any, refusal error) (any, error) // nil but on a Cluster

	mu    sync.Mutex
	out   int     // round trips under way
	queue []*call // calls waiting for the next one
}

// maxBatch bounds the calls in one pipeline, so that one round trip
// never carries more work than Redis can do within a request's deadline:
// at about 25 µs of Redis time per three-tier call, 128 calls take about
// 3 ms. Calls beyond it wait for the next round trip, and are dropped if
// their deadline passes meanwhile.
const maxBatch = 128

// call is one apply.lua call waiting in a pipe's queue.
type call struct {
	ctx   context.Context
	keys  []string
	args  []any
	reply any
	err   error
	done  chan struct{} // closed when reply and err are set
}

// do runs apply.lua with keys and args, within ctx. If ctx ends first, do
// returns ctx's error; the call may still run on Redis, as any call whose
// reply is lost may.
func (p *pipe) do(ctx context.Context, keys []string, args []any) (any, error) {
	p.mu.Lock()
	if p.out < p.max {
		p.out++
		p.mu.Unlock()
		defer p.done()
		reply, err := applyScript.Run(ctx, p.rdb, keys, args...).Result()
		if p.redirected(err) {
			return p.redirect(ctx, keys, args, err)
		}
		return reply, err
	}
	c := &call{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		select {
		case <-c.done: // both ready: the answer, not a lost request
			return c.reply, c.err
		default:
			return nil, ctx.Err()
		}
	}
}

// done ends a round trip. If calls are waiting, the round trip's place
// goes to a pipeline of them instead, run by a goroutine of its own so
// that the caller that ended it can return.
func (p *pipe) done() {
	p.mu.Lock()
	q := p.take()
	if len(q) == 0 {
		p.out--
	}
	p.mu.Unlock()
	if len(q) > 0 {
		go p.flush(q)
	}
}

// flush sends q as pipelines, and then whatever queued meanwhile, until
// the queue is empty.
func (p *pipe) flush(q []*call) {
	for len(q) > 0 {
		p.send(q)
		p.mu.Lock()
		q = p.take()
		if len(q) == 0 {
			p.out--
		}
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

// send runs q as one pipeline and gives each call its reply. Calls whose
// context has ended are dropped unsent. The pipeline's deadline is the
// latest of the calls': a call with an earlier one stops waiting at its
// own. After a NOSCRIPT (Redis lost its script cache), the script is
// loaded and the calls that got it are sent again, as one more pipeline.
func (p *pipe) send(q []*call) {
	live := make([]*call, 0, len(q))
	var deadline time.Time
	bounded := true
	for _, c := range q {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		if d, ok := c.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	retry := p.exec(ctx, live)
	if len(retry) == 0 {
		return
	}
	if err := applyScript.Load(ctx, p.rdb).Err(); err != nil {
		for _, c := range retry {
			c.err = err
			close(c.done)
		}
		return
	}
	for _, c := range p.exec(ctx, retry) {
		close(c.done) // still NOSCRIPT: the cache was flushed again
	}
}

// exec sends q as one pipeline and gives each call its reply, except the
// calls that got NOSCRIPT, which it returns with that error set.
func (p *pipe) exec(ctx context.Context, q []*call) (noscript []*call) {
	pl := p.rdb.Pipeline()
	cmds := make([]*goredis.Cmd, len(q))
	for i, c := range q {
		cmds[i] = pl.EvalSha(ctx, applyScript.Hash(), c.keys, c.args...)
	}
	_, _ = pl.Exec(ctx) // each command carries its own error
	for i, c := range q {
		c.reply, c.err = cmds[i].Result()
		switch {
		case c.err == nil:
		case goredis.HasErrorPrefix(c.err, "NOSCRIPT"):
			noscript = append(noscript, c)
			continue
		case p.redirected(c.err):
			go func() { // on its own, so the round trip ends now
				c.reply, c.err = p.redirect(c.ctx, c.keys, c.args, c.err)
				close(c.done)
			}()
			continue
		}
		close(c.done)
	}
	return noscript
}

// redirected reports whether err is a Cluster node's refusal to run a
// call whose slot it does not serve right now, and p can send the call
// where the refusal points.
func (p *pipe) redirected(err error) bool {
	return p.redirect != nil && isRedirect(err)
}

// isRedirect reports whether err is MOVED or ASK.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	_, moved := goredis.IsMovedError(err)
	_, ask := goredis.IsAskError(err)
	return moved || ask
}
