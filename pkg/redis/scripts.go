package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

var (
	//go:embed scripts/lib.lua
	libSrc string
	//go:embed scripts/fast.lua
	fastSrc string
	//go:embed scripts/apply.lua
	applySrc string
	//go:embed scripts/refund.lua
	refundSrc string

	// Both scripts share the prelude's constants and lib.lua's
	// arithmetic, prepended at load time. fast.lua opens apply.lua: it
	// reads the clock and may decide a whole batch before apply.lua.
	applyScript  = goredis.NewScript(prelude() + libSrc + fastSrc + applySrc)
	refundScript = goredis.NewScript(prelude() + libSrc + refundSrc)
)

// prelude returns the constants that the scripts share with Go, so that
// the two cannot disagree about them: one per limits.Algorithm, named
// after the algorithm in capitals and set to its Go value (local
// FIXED_WINDOW = 0, ...); apply.lua's modes, MODE_APPLY, MODE_RESERVE,
// MODE_REPORT and MODE_FAST; fast.lua's key record FASTSPEC, its size
// FASTREC, and FAST_FITS, which opens its reply; a check's record, its struct format SPEC and its size
// CHECK in bytes; a check's modes in its record, CHECK_ENFORCED,
// CHECK_SHADOW and CHECK_QUOTA, and CHECK_USAGE, added to a usage
// charge's; MAXCOUNT, where counts in debt stop (limits.MaxCount); and
// CAL_SPAN, 2^calShift, which packs a calendar check's edges (calendar.go).
func prelude() string {
	var b strings.Builder
	for _, a := range limits.AllAlgorithms {
		fmt.Fprintf(&b, "local %s = %d\n", luaName(a), int(a))
	}
	fmt.Fprintf(&b, "local MODE_APPLY, MODE_RESERVE, MODE_REPORT, MODE_FAST = '%s', '%s', '%s', '%s'\n", modeApply, modeReserve, modeReport, modeFast)
	fmt.Fprintf(&b, "local FASTSPEC, FASTREC, FAST_FITS = '%s', %d, %d\n", fastSpec, fastSize, fastFits)
	fmt.Fprintf(&b, "local SPEC, CHECK = '%s', %d\n", checkSpec, checkSize)
	fmt.Fprintf(&b, "local CHECK_ENFORCED, CHECK_SHADOW, CHECK_QUOTA, CHECK_REFUND, CHECK_USAGE = %d, %d, %d, %d, %d\n", checkEnforced, checkShadow, checkQuota, checkRefund, checkUsage)
	fmt.Fprintf(&b, "local REFUNDS, REFUNDS_CHANNEL = '%s', '%s'\n", refundsMark, RefundsChannel)
	fmt.Fprintf(&b, "local MAXCOUNT = %d\n", limits.MaxCount)
	fmt.Fprintf(&b, "local SLOT_INFIX = '%s'\n", slotInfix)
	fmt.Fprintf(&b, "local RESERVING = %d\n", reserving)
	fmt.Fprintf(&b, "local MAX_RESERVATIONS = %d\n", limits.MaxReservations)
	fmt.Fprintf(&b, "local CAL_SPAN = %d\n", 1<<calShift)
	return b.String()
}

// luaName returns the name of a's constant in the scripts.
func luaName(a limits.Algorithm) string { return strings.ToUpper(a.String()) }

// A check's record in the scripts' ARGV (see appendCheck) is two bytes,
// checkFloats float64s and two uint32s: checkSize bytes in all, in
// struct's format checkSpec. The prelude gives the scripts the last two
// as CHECK and SPEC.
const (
	checkFloats = 6
	checkSize   = 2 + checkFloats*8 + 2*4
)

var checkSpec = "<BB" + strings.Repeat("d", checkFloats) + "I4I4"

// A check's mode in its record: how its verdict counts toward its
// request's (see appendCheck).
const (
	checkEnforced = 0 // over rejects the request
	checkShadow   = 1 // over rejects nothing
	checkQuota    = 2 // over rejects with every other quota group
	// checkRefund gives its hits back (limits.Check.Refund) before the
	// call decides anything, and is then checked for zero hits; over or
	// not, it rejects nothing. A mode of its own, never with checkUsage.
	checkRefund = 3
	// checkUsage is added to a usage charge's mode (limits.Check.Usage):
	// its hits count whatever the verdict.
	checkUsage = 4
)

// logSuffix names a sliding log's second key. Keys of limits.AppendKey end
// in a limit ID, which ends in a digit, so no key ends in it.
const logSuffix = ":h"

// reserving is added to the algorithm of a reservation's record
// (limits.Check.Reserves); the prelude gives it to the scripts as
// RESERVING. Above every algorithm.
const reserving = 16

// slotInfix comes between a concurrency limit's key and a request's hold
// in the key that names the request's slot (see appendKeys); the prelude
// gives it to the scripts as SLOT_INFIX.
const slotInfix = ":s:"

// anyExtra reports whether a check of checks idx (nil: all) asks for a
// lease.
func anyExtra(checks []limits.Check, idx []int) bool {
	if idx == nil {
		for i := range checks {
			if checks[i].Extra > 0 {
				return true
			}
		}
		return false
	}
	for _, i := range idx {
		if checks[i].Extra > 0 {
			return true
		}
	}
	return false
}

// anyRefund reports whether a check of checks idx (nil: all) is a refund
// of some hits, or a reservation: apply.lua then runs its refund phase
// first, and ends each request's reply with its reservations released.
func anyRefund(checks []limits.Check, idx []int) bool {
	if idx == nil {
		for i := range checks {
			if checks[i].Refunds() || checks[i].Ledgered() {
				return true
			}
		}
		return false
	}
	for _, i := range idx {
		if checks[i].Refunds() || checks[i].Ledgered() {
			return true
		}
	}
	return false
}

// apply.lua's modes, its ARGV[2]; the prelude gives them to the scripts
// as MODE_APPLY, MODE_RESERVE and MODE_REPORT.
const (
	modeApply   = "0" // decide, and write if admitted
	modeReserve = "1" // the same, and return refund receipts (a slot group)
	modeReport  = "2" // decide, write nothing, report as if rejected
	modeFast    = "3" // modeApply, by distinct key first (fast.lua)

	// refundsMark, after modeApply or modeReserve, says that the call has
	// refunds (checkRefund records with hits), which apply.lua gives back
	// before anything else. Calls without refunds pay nothing for them.
	refundsMark = "r"
)

// RefundsChannel is the Redis Pub/Sub channel on which apply.lua
// publishes every key it gives hits back to (limits.Check.Refund), as
// stored, key prefix included: a sidecar's deny cache remembers keys as
// over, and must forget them when another sidecar's refund makes room
// (see Store.Refunds).
const RefundsChannel = "ratelimit-sidecar:refunds"

// baseMode returns mode without refundsMark.
func baseMode(mode string) string { return strings.TrimSuffix(mode, refundsMark) }

// setArgs sets the KEYS and ARGV of c, a call of apply.lua in mode, for
// checks idx (nil: all) of checks, whose request has quotaGroups quota
// groups (limits.Batch.QuotaGroups); with 0, the script leaves the
// quota groups' verdict to the caller (see appendCheck). The keys and
// the spec are cut from one string, so a call allocates once for them,
// however many checks it has.
func (s *Store) setArgs(c *call, checks []limits.Check, idx []int, quotaGroups int, now, mode string) {
	n := len(idx)
	if idx == nil {
		n = len(checks)
	}
	check := func(j int) *limits.Check {
		if idx != nil {
			return &checks[idx[j]]
		}
		return &checks[j]
	}
	b := c.buf[:0]
	for j := range n {
		b = s.appendKeys(b, check(j))
	}
	var at int64 // the sidecar's clock, for calendar checks only
	for j := range n {
		if at == 0 && check(j).Limit.Calendared() {
			at = s.goMicros(now)
		}
		b = appendCheck(b, check(j), quotaGroups, at)
	}
	all := string(b)
	c.buf = b
	for j := range n {
		c.keys, all = s.cutKeys(c.keys, all, check(j))
	}
	if mode != modeReport && anyRefund(checks, idx) {
		mode += refundsMark
	}
	c.now, c.mode, c.spec = now, mode, all
	c.checks, c.grants = n, anyExtra(checks, idx)
	c.fastOK = mode == modeApply
	for j := 0; j < n && c.fastOK; j++ {
		c.fastOK = fastCheck(check(j))
	}
	c.args = append(c.args[:0], &c.now, &c.mode, &c.spec)
}

// appendKeys appends the keys of c to b, one after the other: its key, and
// for a sliding log its second key; for a concurrency limit, its key (a
// sorted set of the slots) and then the key followed by slotInfix and
// c's hold, which names the request's slot in the script and is never
// read nor written: it is a key only so that it may go in KEYS.
func (s *Store) appendKeys(b []byte, c *limits.Check) []byte {
	b = append(b, s.prefix...)
	b = append(b, c.Key...)
	switch c.Limit.Algorithm {
	case limits.SlidingLog:
		b = append(b, s.prefix...)
		b = append(b, c.Key...)
		b = append(b, logSuffix...)
	case limits.Concurrency:
		b = append(b, s.prefix...)
		b = append(b, c.Key...)
		b = append(b, slotInfix...)
		b = append(b, c.Hold...)
	default:
		if c.Ledgered() {
			// The ledger, then the ledger, ':' and the hold (which may
			// be empty).
			for range 2 {
				b = append(b, s.prefix...)
				b = append(b, c.Key...)
				b = append(b, limits.LedgerSuffix...)
			}
			b = append(b, ':')
			b = append(b, c.Hold...)
		}
	}
	return b
}

// cutKeys cuts the keys of c, as appendKeys wrote them, from the front of
// all, appends them to keys, and returns what follows them in all.
func (s *Store) cutKeys(keys []string, all string, c *limits.Check) ([]string, string) {
	n := len(s.prefix) + len(c.Key)
	keys = append(keys, all[:n])
	all = all[n:]
	switch c.Limit.Algorithm {
	case limits.SlidingLog:
		n += len(logSuffix)
		keys = append(keys, all[:n])
		all = all[n:]
	case limits.Concurrency:
		n += len(slotInfix) + len(c.Hold)
		keys = append(keys, all[:n])
		all = all[n:]
	default:
		if c.Ledgered() {
			n += len(limits.LedgerSuffix)
			keys = append(keys, all[:n])
			all = all[n:]
			n += 1 + len(c.Hold)
			keys = append(keys, all[:n])
			all = all[n:]
		}
	}
	return keys, all
}

// appendCheck appends the record of c that both scripts read (SPEC in
// the prelude): algorithm and mode (checkEnforced, checkShadow or
// checkQuota, plus checkUsage for a usage charge with hits) as bytes; then requests, window µs, tick µs, burst, hits
// and extra as little-endian float64s; then, for a quota check, its
// group and its request's quotaGroups as little-endian uint32s (0 and 0
// otherwise). Binary numbers spare Redis parsing decimals; a float64 is
// exact for every integer that limits.Limit allows (below 2^53), and
// rounds larger hits as Lua would.
//
// With quotaGroups 0 a quota check is written as a shadow check, which
// rejects nothing and, when over, consumes nothing, as a quota check
// does: the caller decides the quota groups' verdict from the outcomes,
// as a Cluster does for a request across slots.
//
// A calendar check's window, tick and burst carry its window's edges
// around at, the sidecar's clock in µs (see calendarFields).
func appendCheck(spec []byte, c *limits.Check, quotaGroups int, at int64) []byte {
	l := c.Limit
	mode, group := byte(checkEnforced), 0
	switch {
	case l.Shadow, c.Group > 0 && quotaGroups <= 0:
		mode = checkShadow
	case c.Group > 0:
		mode, group = checkQuota, c.Group
	}
	if mode != checkQuota {
		quotaGroups = 0
	}
	if c.Usage && c.Hits > 0 {
		mode += checkUsage
	}
	if c.Refund {
		mode, quotaGroups, group = checkRefund, 0, 0
	}
	alg, extra := byte(l.Algorithm), float64(c.Extra)
	if c.Ledgered() {
		// Never leased: extra carries the release time instead.
		alg, extra = alg+reserving, float64(l.ReleaseAfter.Microseconds())
	}
	spec = append(spec, alg, mode)
	spec = appendFloat(spec, float64(l.Requests))
	if l.Calendared() {
		w, tick, burst := calendarFields(l, at)
		spec = appendFloat(spec, w)
		spec = appendFloat(spec, tick)
		spec = appendFloat(spec, burst)
	} else {
		spec = appendFloat(spec, float64(l.Window().Microseconds()))
		spec = appendFloat(spec, float64(l.Tick()))
		spec = appendFloat(spec, float64(l.Burst))
	}
	spec = appendFloat(spec, float64(c.Hits))
	spec = appendFloat(spec, extra)
	spec = binary.LittleEndian.AppendUint32(spec, uint32(min(group, math.MaxUint32)))
	return binary.LittleEndian.AppendUint32(spec, uint32(min(quotaGroups, math.MaxUint32)))
}

// appendFloat appends f as a little-endian float64, struct's '<d'.
func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// float reads the little-endian float64 at off in rec: a check's or a
// key's record (struct's '<d'), or a stored state (inspect.go):
// appendFloat's inverse.
func float(rec string, off int) float64 {
	var u uint64
	for i := off + 7; i >= off; i-- {
		u = u<<8 | uint64(rec[i])
	}
	return math.Float64frombits(u)
}

// maxScriptKeys bounds the KEYS of one apply.lua call that carries
// several requests: the script unpacks them onto Lua's stack for MGET,
// which holds at most about 8000 values.
const maxScriptKeys = 1024

// applySHA is apply.lua's SHA1 as a command argument, boxed once.
var applySHA any = applyScript.Hash()

// evalsha returns c's EVALSHA command alone: evalshaAll of c.
func (c *call) evalsha(ctx context.Context) *goredis.IntSliceCmd {
	one := [1]*call{c}
	return c.evalshaAll(ctx, one[:])
}

// evalshaAll returns the EVALSHA command that decides the calls of q, c
// first, in one apply.lua call, built in c's reused argument slice
// instead of go-redis's per-call copy: the keys of them all, then now
// and mode, which they share, then each call's spec. Calls of several
// slots (on a Cluster master) go with no KEYS, which may not span slots:
// now, mode, the number of calls, their specs, then their keys, as ARGV.
// Keys and specs go in as pointers into the calls, which go-redis writes
// as the strings, unboxed.
//
// The command reads the reply straight into a []int64, as apply.lua's
// reply is an array of integers. It is lenient where the store is not: it
// reads a nil element as 0 and a decimal string as its number. A reply
// that is not an array at all fails the call as a broken connection does
// (go-redis closes the connection), not as a ReplyError.
func (c *call) evalshaAll(ctx context.Context, q []*call) *goredis.IntSliceCmd {
	c.fast.sent = false // in MODE_APPLY, whatever an earlier send of c was
	keys := func() {
		for _, o := range q {
			for i := range o.keys {
				c.argv = append(c.argv, &o.keys[i])
			}
		}
	}
	specs := func() {
		for _, o := range q {
			c.argv = append(c.argv, &o.spec)
		}
	}
	if split(q) {
		c.argv = append(c.argv[:0], "evalsha", applySHA, 0, &c.now, &c.mode, strconv.Itoa(len(q)))
		specs()
		keys()
		c.cmd = goredis.NewIntSliceCmd(ctx, c.argv...)
		return c.cmd
	}
	n := 0
	for _, o := range q {
		n += len(o.keys)
	}
	c.argv = append(c.argv[:0], "evalsha", applySHA, n)
	keys()
	c.argv = append(c.argv, &c.now, &c.mode)
	specs()
	c.cmd = goredis.NewIntSliceCmd(ctx, c.argv...)
	c.cmd.SetFirstKeyPos(3)
	return c.cmd
}

// split reports whether the calls of q are of more than one slot.
func split(q []*call) bool {
	for _, o := range q[1:] {
		if o.slot != q[0].slot {
			return true
		}
	}
	return false
}
