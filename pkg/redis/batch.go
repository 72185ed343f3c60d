package redis

import (
	"context"
	"runtime"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batch is the round trip that a call leads when it is woken to send
// one: the calls taken for it (the leader's own included), and scratch
// that the pooled call keeps from one batch it leads to the next. The
// zero value leads nothing.
type batch struct {
	// leads says that the call is to send calls as a round trip that
	// started at start (on clock); else, once woken, its reply is set.
	// If gathers is set, calls is the pipe's open batch, which others
	// may join until the leader closes it, and p.mu guards it.
	leads, gathers bool
	calls          []*call
	start          time.Duration
	// live and cmds are scratch for send and exec, reused.
	live []*call
	cmds []goredis.Cmder
}

// reset empties b for the call's next use, keeping its scratch.
func (b *batch) reset() {
	clear(b.live)
	clear(b.cmds)
	*b = batch{live: b.live[:0], cmds: b.cmds[:0]}
}

// lead sends the batch that woken call c leads, as the round trip it was
// handed, ends that round trip, and waits for c's own reply.
func (p *pipe) lead(c *call) {
	b := &c.batch
	b.leads = false
	if b.gathers {
		// Let the calls made at the same moment, such as those of a
		// batch just answered, join (see do) before the batch closes.
		b.gathers = false
		runtime.Gosched()
		p.mu.Lock()
		if p.adapt.open == c {
			p.adapt.open = nil
		}
		p.mu.Unlock()
	}
	q := b.calls
	b.calls = nil
	p.send(c, q)
	p.pass(b.start)
	<-c.wake // its own reply, delivered as the others'
	c.facts.led = true
}

// claimLeader claims the call of q with the latest deadline (or none)
// whose caller still waits, and returns it; nil if every caller gave up.
func claimLeader(q []*call) *call {
	for {
		var lead *call
		var latest time.Time
		for _, c := range q {
			if c.state.Load() != waiting {
				continue
			}
			d, ok := c.ctx.Deadline()
			if !ok {
				lead = c
				break
			}
			if lead == nil || d.After(latest) {
				lead, latest = c, d
			}
		}
		if lead == nil {
			return nil
		}
		if lead.state.CompareAndSwap(waiting, claimed) {
			return lead
		}
	}
}

// deliver hands c its reply, or recycles it if its caller gave up.
func deliver(lead, c *call) {
	if c == lead || c.state.CompareAndSwap(waiting, claimed) {
		c.wake <- struct{}{}
		return
	}
	putCall(c)
}

// send runs q, which lead leads, as one pipeline and delivers each call
// its reply. Calls whose context has ended are dropped unsent. The
// pipeline's deadline is the latest of the calls': a call with an earlier
// one stops waiting at its own. After a NOSCRIPT (Redis lost its script
// cache), the script is loaded and the calls that got it are sent again,
// as one more pipeline.
func (p *pipe) send(lead *call, q []*call) {
	live := lead.batch.live[:0]
	defer func() { lead.batch.live = live[:0] }()
	var deadline time.Time
	bounded := true
	for _, c := range q {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			deliver(lead, c)
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
		ctx = &deadlineCtx{Context: ctx, d: deadline}
	}
	retry := p.exec(ctx, lead, live)
	if len(retry) == 0 {
		return
	}
	if err := applyScript.Load(ctx, p.rdb).Err(); err != nil {
		for _, c := range retry {
			c.err = err
			deliver(lead, c)
		}
		return
	}
	for _, c := range p.exec(ctx, lead, retry) {
		deliver(lead, c) // still NOSCRIPT: the cache was flushed again
	}
}

// exec sends q as one pipeline and delivers each call its reply, except
// the calls that got NOSCRIPT, which it returns with that error set. It
// reorders q so that calls that can share an apply.lua call (see joins)
// are next to each other, keeping their order, and sends each run of
// them as one.
func (p *pipe) exec(ctx context.Context, lead *call, q []*call) (noscript []*call) {
	gather(q, p.cross)
	pl := p.rdb.Pipeline()
	cmds := lead.batch.cmds[:0]
	for a := 0; a < len(q); {
		b := runEnd(q, a, p.cross)
		var cmd *goredis.IntSliceCmd
		if b-a > 1 && p.fast.open() {
			cmd = q[a].evalshaFast(ctx, q[a:b])
		}
		if cmd == nil {
			cmd = q[a].evalshaAll(ctx, q[a:b])
		}
		cmds = append(cmds, cmd)
		a = b
	}
	_ = pl.BatchProcess(ctx, cmds...)
	for _, c := range q {
		if c.span != nil {
			c.facts = spanFacts{batch: len(q), scripts: len(cmds), sent: lead.batch.start}
		}
	}
	clear(cmds)
	lead.batch.cmds = cmds[:0]
	_, execErr := pl.Exec(ctx) // each command carries its own error, mostly
	for a := 0; a < len(q); {
		b := runEnd(q, a, p.cross)
		run := q[a:b]
		a = b
		reply, err := run[0].cmd.Result()
		if err == nil && reply == nil && execErr != nil {
			// go-redis puts the errors of reaching Redis on each command,
			// but not a Redis error in opening the connection (WRONGPASS
			// once a password has rotated), which only Exec returns:
			// without it the call would fail as a bad reply, hiding
			// Redis's message.
			err = execErr
		}
		if err == nil {
			err = p.cut(reply, run)
		} else if len(run) > 1 && p.refusedRun(err) {
			// A slot of the call's has moved, or is moving: nothing ran.
			// Each call goes again on its own, with its keys, and follows
			// the redirection where its own keys are.
			for _, c := range run {
				p.behind(lead, c, func(ctx context.Context) ([]int64, error) {
					return p.one(ctx, c)
				})
			}
			continue
		}
		for _, c := range run {
			if err != nil {
				c.reply, c.err = nil, err
			}
			switch {
			case c.err == nil:
			case goredis.HasErrorPrefix(c.err, "NOSCRIPT"):
				noscript = append(noscript, c)
				continue
			case p.redirected(c.err):
				refusal := c.err
				p.behind(lead, c, func(ctx context.Context) ([]int64, error) {
					return p.redirect(ctx, c.keys, c.args, refusal)
				})
				continue
			}
			deliver(lead, c)
		}
	}
	return noscript
}

// behind sends c of the batch that lead leads again, by f, on a
// goroutine of its own so that the round trip ends now, and delivers
// c's reply. The goroutine is the warmer's, within c.ctx: Close ends it
// and waits for it. Once the store is closing (or without a warmer), f
// runs here.
func (p *pipe) behind(lead, c *call, f func(ctx context.Context) ([]int64, error)) {
	resend := func(ctx context.Context) {
		c.reply, c.err = f(ctx)
		deliver(lead, c)
	}
	if p.warmer == nil || !p.warmer.within(c.ctx, resend) {
		resend(c.ctx)
	}
}

// gather reorders q, stably, so that the calls that join its first call
// come first, then those that join the first of the rest, and so on. On
// standalone Redis every call usually joins the first, and q stays as it
// is.
func gather(q []*call, cross bool) {
	for a := 0; a < len(q); {
		keys := len(q[a].keys)
		b := a + 1
		for i := a + 1; i < len(q); i++ {
			if !q[a].joins(q[i], keys, cross) {
				continue
			}
			keys += len(q[i].keys)
			if i != b {
				c := q[i]
				copy(q[b+1:i+1], q[b:i])
				q[b] = c
			}
			b++
		}
		a = b
	}
}

// runEnd returns the end of the run of calls of q, gathered, that starts
// at a and is sent as one apply.lua call.
func runEnd(q []*call, a int, cross bool) int {
	keys := len(q[a].keys)
	b := a + 1
	for b < len(q) && q[a].joins(q[b], keys, cross) {
		keys += len(q[b].keys)
		b++
	}
	return b
}
