package memory

import (
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// What reservation says of a check that reserves, besides 0: it holds
// one already, or its key holds limits.MaxReservations.
const (
	heldAgain uint8 = 1 + iota
	ledgerFull
)

// A limit's reservations (limits.Check.Reserves) are kept in an entry of
// their own, the ledger: the limit's key and limits.LedgerSuffix, in the
// shard of the limit's key, so that the batch's locks cover it.

// ledgerOf returns the slot of c's ledger in sh, or -1.
// requires sh.mu held
func (sh *shard) ledgerOf(c *limits.Check) int32 {
	if j, ok := sh.m[c.Key+limits.LedgerSuffix]; ok {
		return j
	}
	return -1
}

// reservation gives back, before c's batch is decided, the reservations
// on c's key that are due, and, if c is a refund, settles its hold's
// reservation (or gives its hits back if it names none). It returns how
// many it released, and whether c, not a refund, names a hold that holds
// a reservation already (heldAgain), or whose ledger is full
// (ledgerFull: limits.MaxReservations).
// requires the key's shard locked
func (s *Store) reservation(hash uint64, c *limits.Check, now int64) (released uint64, held uint8) {
	sh := &s.shards[s.shardOf(hash)]
	j := sh.ledgerOf(c)
	if j < 0 {
		if c.Refunds() && c.Hold == "" {
			s.refund(hash, c, now)
		}
		return 0, 0
	}
	due, ledger := c.Limit.Due(sh.keys[j].st, now)
	if len(due) > 0 {
		released = uint64(len(due))
		s.giveBack(hash, c, now, func(st limits.State, now int64) limits.State {
			for _, r := range due {
				st = c.Limit.Refund(st, now, r.Hits)
			}
			return st
		})
	}
	switch {
	case c.Refund && c.Hold == "":
		// Given back as any refund: it names no reservation.
		s.refund(hash, c, now)
	case c.Refund:
		var hits uint64
		var ok bool
		if hits, ledger, ok = c.Limit.Unhold(ledger, c.Hold, now); ok {
			s.giveBack(hash, c, now, func(st limits.State, now int64) limits.State {
				return c.Limit.Refund(st, now, min(hits, c.Hits))
			})
		}
	case c.Hold != "" && c.Hits > 0 && limits.Holds(ledger, c.Hold, now):
		held = heldAgain
	case c.Hold != "" && c.Hits > 0 && len(ledger.Slots) >= limits.MaxReservations:
		held = ledgerFull
	}
	j = sh.ledgerOf(c) // giveBack may have made room
	switch {
	case j < 0:
	case ledger.Expire <= now:
		sh.remove(j)
	default:
		sh.keys[j].st, sh.keys[j].used = ledger, now
	}
	return released, held
}

// reserve records admitted check c's hits under its hold.
// requires the key's shard locked
func (s *Store) reserve(hash uint64, c *limits.Check, now int64) {
	sh := &s.shards[s.shardOf(hash)]
	if j := sh.ledgerOf(c); j >= 0 {
		e := &sh.keys[j]
		e.st, e.used = c.Limit.Reserve(e.st, now, c.Hold, c.Hits), now
		return
	}
	key := c.Key + limits.LedgerSuffix
	sh.makeRoom(weight(key), now)
	sh.insert(entry{key: key, hash: hash, st: c.Limit.Reserve(limits.State{}, now, c.Hold, c.Hits), lim: c.Limit, used: now, ledger: true})
}

// soonerRelease returns reset, how long until over check c could fit, or
// sooner, when the first reservation on its key is released.
// requires the key's shard locked
func (s *Store) soonerRelease(hash uint64, c *limits.Check, now int64, reset time.Duration) time.Duration {
	sh := &s.shards[s.shardOf(hash)]
	j := sh.ledgerOf(c)
	if j < 0 {
		return reset
	}
	if at := limits.SoonestRelease(sh.keys[j].st); at > now {
		return min(reset, time.Duration(at-now)*time.Microsecond)
	}
	return reset
}
