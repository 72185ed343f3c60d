package redis

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// A batch of several requests goes to apply.lua in MODE_FAST when every
// check of it could be decided per key (see fast.lua): each distinct key
// once, for the hits of the whole batch. That is most of Redis's cost of
// a tiered batch, whose global and tenant keys repeat in every request.
// When a key does not fit, the same call decides the batch as MODE_APPLY
// does, so a batch costs one round trip either way.

// fast.lua's record of a key, FASTSPEC in the prelude: algorithm, then
// requests, window µs, tick µs, burst and the batch's hits as
// little-endian float64s, fastSize bytes; and the first value of its
// reply when every key fits (apply.lua's first value is a request's
// verdict, 0 or 1).
const (
	fastSize = 1 + 5*8
	fastFits = 2
)

var fastSpec = "<B" + strings.Repeat("d", 5)

// modeFastArg is modeFast as a command argument, boxed once.
var modeFastArg any = modeFast

// fastBackoff is how many batches a pipe sends in MODE_APPLY after one
// in MODE_FAST did not fit: a batch that does not fit pays for deciding
// its keys twice, once per key and once per check, and a key at its
// limit usually stays there for a while.
const fastBackoff = 16

// fastGate holds MODE_FAST back for fastBackoff batches after one that
// did not fit, and counts both outcomes.
type fastGate struct {
	skip         atomic.Int32
	fits, misses atomic.Int64
	// backoff, if not 0, replaces fastBackoff (tests: -1 never holds
	// back).
	backoff int32
}

// open reports whether the next batch may try MODE_FAST.
func (g *fastGate) open() bool {
	if g.skip.Load() <= 0 {
		return true
	}
	g.skip.Add(-1)
	return false
}

// fit notes a batch in MODE_FAST that fit.
func (g *fastGate) fit() { g.fits.Add(1) }

// missed notes a batch in MODE_FAST that did not fit.
func (g *fastGate) missed() {
	g.misses.Add(1)
	b := g.backoff
	if b == 0 {
		b = fastBackoff
	}
	g.skip.Store(b)
}

// fastCheck reports whether c can be decided per key: an enforced or
// shadow check of any algorithm but the sliding log (whose state is one
// entry per request), with hits, and no lease, quota group or usage
// charge. A shadow check that fits consumes its hits as an enforced one
// does; one that does not fit sends the batch to apply.lua's checks.
// Calendar windows (limits.Calendar) are decided by apply.lua only:
// fast.lua knows no calendar, so a batch with one goes there whole.
func fastCheck(c *limits.Check) bool {
	alg := c.Limit.Algorithm
	return alg != limits.SlidingLog && alg != limits.Concurrency && c.Hold == "" && c.Limit.ReleaseAfter == 0 && c.Hits > 0 && c.Extra == 0 && c.Group == 0 && !c.Usage && !c.Refund && !c.Limit.Calendared()
}

// fastScratch is what a call that leads a batch in MODE_FAST keeps to
// read its reply: per check of the batch, in order, the index of its key
// among the distinct keys and its hits; per distinct key, the hits of
// the batch. It is reused with the call.
type fastScratch struct {
	sent  bool
	index map[string]int32
	key   []int32
	hits  []float64
	sum   []float64
	// spec and order are ARGV[3] and ARGV[4] (see fast.lua), cut from
	// one string.
	spec, order string
	buf         []byte
}

// reset readies f for another batch, keeping its memory.
func (f *fastScratch) reset() {
	f.sent = false
	clear(f.index)
	f.key, f.hits, f.sum = f.key[:0], f.hits[:0], f.sum[:0]
	f.spec, f.order = "", ""
}

// evalshaFast returns the EVALSHA command that decides the calls of q, c
// first, in MODE_FAST, built as evalshaAll builds it; nil if a call of q
// cannot go in MODE_FAST, or two checks on one key have different
// limits.
func (c *call) evalshaFast(ctx context.Context, q []*call) *goredis.IntSliceCmd {
	f := &c.fast
	f.reset()
	if f.index == nil {
		f.index = make(map[string]int32)
	}
	c.argv = append(c.argv[:0], "evalsha", applySHA, 0)
	b := f.buf[:0]
	for _, o := range q {
		if !o.fastOK || o.slot != c.slot {
			return nil
		}
		for i := range o.keys {
			rec := o.spec[i*checkSize:]
			hits := float(rec, 34)
			d, ok := f.index[o.keys[i]]
			if !ok {
				d = int32(len(f.sum))
				f.index[o.keys[i]] = d
				f.sum = append(f.sum, 0)
				c.argv = append(c.argv, &o.keys[i])
				b = append(b, rec[0])
				b = append(b, rec[2:34]...) // requests, window, tick, burst
				b = appendFloat(b, 0)       // the batch's hits, below
			} else if off := int(d) * fastSize; string(b[off:off+1]) != rec[:1] || string(b[off+1:off+33]) != rec[2:34] {
				return nil
			}
			f.sum[d] += hits
			f.key = append(f.key, d)
			f.hits = append(f.hits, hits)
		}
	}
	for d, sum := range f.sum {
		binary.LittleEndian.PutUint64(b[d*fastSize+33:], math.Float64bits(sum))
	}
	n := len(b)
	for _, d := range f.key {
		b = binary.LittleEndian.AppendUint16(b, uint16(d))
	}
	all := string(b)
	f.buf = b
	f.spec, f.order, f.sent = all[:n], all[n:], true
	c.argv[2] = len(f.sum)
	c.argv = append(c.argv, &c.now, modeFastArg, &f.spec, &f.order)
	for _, o := range q {
		c.argv = append(c.argv, &o.spec)
	}
	c.cmd = goredis.NewIntSliceCmd(ctx, c.argv...)
	c.cmd.SetFirstKeyPos(3)
	return c.cmd
}

// fastOutcomes turns reply, fast.lua's reply for a batch that fit, into
// each call's apply.lua reply: every request admitted, every check not
// over, with the remaining and reset that deciding the requests one
// after the other would give it. While a key fits, its remaining falls
// by exactly the hits consumed, for every algorithm: a check's is the
// key's after the whole batch plus the batch's hits after it. A window's
// reset is the key's; a bucket's follows its backlog (see bucketReset).
func fastOutcomes(reply []int64, run []*call) error {
	f := &run[0].fast
	if err := checkLen(reply, 1+3*len(f.sum)); err != nil {
		return err
	}
	total := 0
	for _, o := range run {
		total += o.replyLen()
	}
	out := make([]int64, total)
	left := f.sum // the batch's hits after the check, per key
	g := 0
	for _, o := range run {
		n := o.replyLen()
		r := out[:n:n]
		out = out[n:]
		r[0] = 1
		for i := range o.keys {
			d := f.key[g]
			left[d] -= f.hits[g]
			k := reply[1+3*d:]
			r[1+3*i], r[2+3*i], r[3+3*i] = 0, k[0]+int64(left[d]), k[1]
			if alg := limits.Algorithm(f.spec[int(d)*fastSize]); alg == limits.TokenBucket || alg == limits.LeakyBucket {
				r[3+3*i] = bucketReset(f.spec[int(d)*fastSize+1:], k[1], k[2], left[d])
			}
			g++
		}
		o.reply, o.err = r, nil
	}
	return nil
}

// bucketReset returns the reset of a bucket's check that leaves after it
// left of the batch's hits, from the key's record rec (past its
// algorithm) and the reset and backlog (scaled by the window in ticks)
// after the whole batch. The bucket is full again, in whole ticks, once
// its backlog has drained at requests per tick: the check's backlog is
// the batch's less left hits, so its reset is the batch's less the
// ticks those take to drain.
func bucketReset(rec string, reset, backlog int64, left float64) int64 {
	req, w, tick := int64(float(rec, 0)), int64(float(rec, 8)), int64(float(rec, 16))
	mine := backlog - int64(left)*(w/tick)
	return reset - (ceilDiv(backlog, req)-ceilDiv(mine, req))*tick
}

// ceilDiv returns ⌈a / b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
