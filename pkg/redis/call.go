package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A call's state, which decides who recycles it: the waiter once it has
// been woken, or the round trip that finds it abandoned.
const (
	waiting   uint32 = iota // in the queue, its caller waiting
	claimed                 // a wake-up is on its way, which the caller takes
	abandoned               // its caller gave up at its deadline; not woken
)

// call is one apply.lua call: waiting in a pipe's queue, or sent alone.
// Calls are pooled with their channel, timer and argument slices, so that
// a call allocates only the string its keys and spec are cut from (see
// Store.setArgs), its go-redis command and the command's reply.
type call struct {
	ctx  context.Context
	keys []string // KEYS
	// args is ARGV: pointers to now, mode and spec, which go-redis
	// writes as the strings, so that no argument is boxed per call.
	args            []any
	now, mode, spec string
	buf             []byte // scratch for the keys and spec
	reply           []int64
	err             error
	// checks is the number of the call's checks and grants whether one
	// asks for a lease: with mode, they give the length of its reply.
	checks int
	grants bool
	// slot is the hash slot of the call's keys on a Cluster; 0 elsewhere.
	slot uint16
	// fastOK says that the call may go in MODE_FAST (see fastCheck);
	// fast is what the call keeps when it leads a batch sent so.
	fastOK bool
	fast   fastScratch

	state atomic.Uint32
	// batch is the round trip the call leads if it is woken to.
	batch batch
	// wake carries one wake-up per claim; buffered so that the round
	// trip that claims the call never blocks on it.
	wake  chan struct{}
	timer *time.Timer // bounds the wait by ctx's deadline
	argv  []any       // the EVALSHA command, reused
	cmd   *goredis.IntSliceCmd
	// span is where a traced call's caller takes facts, the call's
	// round trip as exec saw it (see trace.go); nil when untraced.
	span  *spanFacts
	facts spanFacts
}

var calls = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &call{wake: make(chan struct{}, 1), timer: t}
}}

// getCall returns a call under ctx, its arguments to be set.
func getCall(ctx context.Context) *call {
	c := calls.Get().(*call)
	c.ctx = ctx
	c.state.Store(waiting)
	return c
}

// putCall recycles c. No one may use c afterwards.
func putCall(c *call) {
	c.timer.Stop()
	clear(c.argv)
	clear(c.keys)
	clear(c.args)
	c.ctx, c.reply, c.err, c.cmd = nil, nil, nil, nil
	c.batch.reset()
	c.now, c.mode, c.spec = "", "", ""
	c.checks, c.grants, c.slot, c.fastOK = 0, false, 0, false
	c.fast.reset()
	c.span, c.facts = nil, spanFacts{}
	c.argv, c.keys, c.args = c.argv[:0], c.keys[:0], c.args[:0]
	calls.Put(c)
}

// joins reports whether c can be decided in one apply.lua call with o,
// sent through a pipe that allows calls of several slots in one (cross)
// or not: same slot unless cross, same mode and clock, and together
// within maxScriptKeys.
func (c *call) joins(o *call, keys int, cross bool) bool {
	return (cross || c.slot == o.slot) && c.mode == o.mode && c.now == o.now && keys+len(o.keys) <= maxScriptKeys
}
