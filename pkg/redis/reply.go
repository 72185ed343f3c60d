package redis

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// readApply reads apply.lua's reply to a call without reserve into outs,
// one per check, and returns whether the request was admitted. grants
// says whether a check asked for a lease, so that the reply ends with
// the grants, and released whether the call had refunds or reservations
// (anyRefund), so that it ends with the reservations released.
func readApply(vals []int64, outs []limits.Outcome, grants, released bool) (bool, error) {
	n := len(outs)
	if err := checkLen(vals, replyLen(n, 3, grants, released)); err != nil {
		return false, err
	}
	admitted, err := flag(vals[0])
	if err != nil {
		return false, err
	}
	for i := range outs {
		v := vals[1+3*i:]
		if outs[i], err = outcome(v[0], v[1], v[2]); err != nil {
			return false, err
		}
		if grants {
			if err := readGrant(&outs[i], vals[1+3*n+grantLen*i:]); err != nil {
				return false, err
			}
		}
	}
	return admitted, readReleased(vals, outs, released)
}

// read reads apply.lua's reply to a reserving call into g.
func (g *group) read(vals []int64, grants, released bool) error {
	n := len(g.idx)
	if err := checkLen(vals, replyLen(n, 4, grants, released)); err != nil {
		return err
	}
	var err error
	if g.admitted, err = flag(vals[0]); err != nil {
		return err
	}
	g.out = make([]limits.Outcome, n)
	g.receipts = make([]int64, n)
	for j := range n {
		v := vals[1+4*j:]
		if g.out[j], err = outcome(v[0], v[1], v[2]); err != nil {
			return err
		}
		if v[3] < -1 {
			return &ReplyError{Script: "apply", Msg: fmt.Sprintf("receipt %d", v[3])}
		}
		g.receipts[j] = v[3]
		if grants {
			if err := readGrant(&g.out[j], vals[1+4*n+grantLen*j:]); err != nil {
				return err
			}
		}
	}
	return readReleased(vals, g.out, released)
}

// readReleased reads, if released, the reservations each check released,
// the last len(outs) values of vals, into outs.
func readReleased(vals []int64, outs []limits.Outcome, released bool) error {
	if !released {
		return nil
	}
	v := vals[len(vals)-len(outs):]
	for i := range outs {
		if v[i] < 0 {
			return &ReplyError{Script: "apply", Msg: fmt.Sprintf("%d reservations released", v[i])}
		}
		outs[i].Released = uint64(v[i])
	}
	return nil
}

// grantLen is the number of values of a check's grant in apply.lua's
// reply: hits, µs and receipt.
const grantLen = 3

// replyLen is the length of apply.lua's reply for n checks of per values
// each, with or without the grants that follow them and the reservations
// released that end it.
func replyLen(n, per int, grants, released bool) int {
	l := 1 + per*n
	if grants {
		l += grantLen * n
	}
	if released {
		l += n
	}
	return l
}

// readGrant reads a check's grant, hits, µs and receipt, into out.
func readGrant(out *limits.Outcome, v []int64) error {
	g, us, receipt := v[0], v[1], v[2]
	if g < 0 || us < 0 || receipt < 0 {
		return &ReplyError{Script: "apply", Msg: fmt.Sprintf("grant %d for %d under %d, want integers >= 0", g, us, receipt)}
	}
	out.Granted, out.GrantFor = uint64(g), micros(us)
	out.GrantReceipt = receipt
	return nil
}

// replyInts returns reply, the reply to apply.lua as go-redis reads any
// reply, as integers, or err if it is set. A reply that is not an array
// of integers is a ReplyError.
func replyInts(reply any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	vals, ok := reply.([]any)
	if !ok {
		return nil, &ReplyError{Script: "apply", Msg: fmt.Sprintf("%T, want an array", reply)}
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, &ReplyError{Script: "apply", Msg: fmt.Sprintf("value %d is %T, want an integer", i, v)}
		}
		ints[i] = n
	}
	return ints, nil
}

// checkLen checks that apply.lua's reply has n values.
func checkLen(vals []int64, n int) error {
	if len(vals) != n {
		return &ReplyError{Script: "apply", Msg: fmt.Sprintf("%d values, want %d", len(vals), n)}
	}
	return nil
}

// flag reads a 0 or 1.
func flag(v int64) (bool, error) {
	switch v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, &ReplyError{Script: "apply", Msg: fmt.Sprintf("flag %d, want 0 or 1", v)}
}

// outcome reads an outcome from the over flag, remaining and reset µs.
func outcome(over, rem, reset int64) (limits.Outcome, error) {
	o, err := flag(over)
	if err != nil {
		return limits.Outcome{}, err
	}
	if rem < 0 || reset < 0 {
		return limits.Outcome{}, &ReplyError{Script: "apply", Msg: fmt.Sprintf("remaining %d and reset %d, want integers >= 0", rem, reset)}
	}
	return limits.Outcome{Over: o, Remaining: uint64(rem), Reset: micros(reset)}, nil
}

// micros converts µs >= 0 to a time.Duration, saturating as
// limits.Limit.Evaluate does: a reset can be longer than a time.Duration
// holds (two windows of a limit per 280 years), and multiplying would wrap
// it to a negative one.
func micros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// replyLen is the length of c's part of an apply.lua reply.
func (c *call) replyLen() int {
	per := 3
	if baseMode(c.mode) == modeReserve {
		per = 4
	}
	return replyLen(c.checks, per, c.grants, strings.HasSuffix(c.mode, refundsMark))
}

// cut cuts reply, the reply to one apply.lua call for run, into each
// call's part.
func cut(reply []int64, run []*call) error {
	if len(run) == 1 {
		run[0].reply, run[0].err = reply, nil
		return nil
	}
	want := 0
	for _, c := range run {
		want += c.replyLen()
	}
	if err := checkLen(reply, want); err != nil {
		return err
	}
	for _, c := range run {
		n := c.replyLen()
		c.reply, c.err = reply[:n:n], nil
		reply = reply[n:]
	}
	return nil
}

// cut gives each call of run its part of reply, the reply to the one
// apply.lua call run was sent as: from fast.lua's reply when the run was
// sent in MODE_FAST and fit, else cut from apply.lua's.
func (p *pipe) cut(reply []int64, run []*call) error {
	if !run[0].fast.sent {
		return cut(reply, run)
	}
	if len(reply) > 0 && reply[0] == fastFits {
		p.fast.fit()
		return fastOutcomes(reply, run)
	}
	p.fast.missed()
	return cut(reply, run)
}
