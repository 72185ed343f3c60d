// Package memory is the embedded limits.Store: process-local state in
// sharded maps, deciding by the process's clock. It is the default store
// when no Redis is configured and the local fallback while Redis cannot
// decide.
package memory

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

const (
	memoryShards = 256
	// sweepEvery bounds how often one shard scans for expired state.
	sweepEvery = time.Second
	// DefaultMaxKeys is Options.MaxKeys's default. A key of about 50
	// bytes costs about 290 bytes of heap, ghost table included, and one
	// of keyUnit bytes about 500: 18 to 32 MiB in all, which stays well
	// under the sidecar's default 64 MiB soft memory limit and the 128 MiB
	// of the pod in k8s/, leaving the garbage collector room. See
	// docs/memory-store.md.
	DefaultMaxKeys = 1 << 16
	// keyUnit is how many bytes of a key count as one key toward MaxKeys:
	// keys made of long descriptor values count as several, so that the
	// cap bounds bytes too.
	keyUnit = 256
	// evictSample is how many keys an eviction looks at to choose one.
	evictSample = 8
	// ghostShare is how many capped keys share one ghost set: the more
	// sets, the more evicted keys it takes to make a set strict.
	ghostShare = 4
)

// Store is a limits.Store in this process's memory. It is safe for
// concurrent use; the zero value is not usable, call New.
//
// A batch locks the shards of its keys in shard order, so batches that
// share keys serialize and batches that don't run in parallel. Expired
// state is dropped by a sweep that each shard runs at most once per second
// while it is in use.
//
// The store holds at most Options.MaxKeys keys, whatever clients send.
// A shard that is full evicts to make room: an expired key if its sweep
// is due or one is among the candidates, else the least recently used of
// evictSample candidates. What an evicted key held is folded into the
// shard's ghost table, which the key starts from if it is seen again, so
// eviction never lets a key admit more than its limit; keys that share a
// ghost set may start fuller than fresh instead (see Evictions and
// GhostStarts).
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	n      uint64 // shards in use
	shards [memoryShards]shard
}

type shard struct {
	mu sync.Mutex
	// m indexes keys: every key is in keys at m[key]. A key keeps its
	// slot until it is dropped; free lists the slots of dropped keys.
	m         map[string]int32 // guarded by mu
	keys      []entry          // guarded by mu
	free      []int32          // guarded by mu
	used      int              // keys' weight (see weight); guarded by mu
	max       int              // most weight
	hand      int              // where the next eviction looks; guarded by mu
	nextSweep int64            // µs; guarded by mu
	ghost     *ghost           // nil until the first live key is evicted; guarded by mu
	ghostSets int              // the ghost's size; set by New

	evictions, ghostStarts uint64 // guarded by mu
}

type entry struct {
	key  string
	hash uint64
	st   limits.State
	lim  *limits.Limit // the last limit that wrote st, to fold it into the ghost; nil: a free slot
	used int64         // µs of the last check
	// ledger marks the reservations of a limit's key (see reserve.go),
	// kept under the key's hash, in its shard, and never ghosted: an
	// evicted reservation is never released, which errs on the strict
	// side.
	ledger bool
}

// Options tunes a Store. The zero value is ready to use.
type Options struct {
	// Now is the clock the store decides by; nil means time.Now.
	Now func() time.Time
	// MaxKeys bounds the keys the store holds, expired ones not yet
	// swept included; a key of more than 256 bytes counts as one key
	// per 256 bytes or part of them. Zero or less means DefaultMaxKeys.
	// Below 16384, fewer shards are used, each holding 64 keys or more.
	MaxKeys int
}

// New returns an empty memory store.
func New(o Options) *Store {
	s := &Store{now: o.Now, seed: maphash.MakeSeed()}
	if s.now == nil {
		s.now = time.Now
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	o.MaxKeys = min(o.MaxKeys, math.MaxInt32) // keys are indexed by int32
	s.n = uint64(min(memoryShards, max(1, o.MaxKeys/64)))
	for i := range s.shards[:s.n] {
		sh := &s.shards[i]
		sh.m = make(map[string]int32)
		sh.max = o.MaxKeys / int(s.n)
		sh.ghostSets = sh.max / ghostShare
	}
	return s
}

// Apply implements limits.Store.
func (s *Store) Apply(_ context.Context, b *limits.Batch) error {
	n := len(b.Checks)
	b.SizeOutcomes()
	b.Admitted = true
	if n == 0 {
		return nil
	}
	now := s.now().UnixMicro()

	var hbuf [16]uint64
	var obuf [16]uint16
	var ibuf [16]int32
	hashes, order := s.lock(b.Checks, hbuf[:0], obuf[:0])
	slots := ibuf[:0]
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()

	held := s.settleLedgers(b, hashes, now)

	// Evaluate in order on working copies, so checks that share a key see
	// each other's hits, then write back if the request is admitted, or
	// what its usage checks consumed if it is not.
	var nbuf, sbuf [16]limits.State
	next, start := nbuf[:0], sbuf[:0]
	for i := range b.Checks {
		c := &b.Checks[i]
		st, slot := s.lookup(hashes[i], c, b.Checks[:i], next, slots, now)
		slots = append(slots, slot)
		var h uint8
		if held != nil {
			h = held[i]
		}
		var out limits.Outcome
		nst := st
		switch {
		case c.Refund || c.Usage || h != 0:
			out, nst = s.evaluateSettled(c, hashes[i], h, st, now)
		default: // the common case, taken here on the hot path
			if out, nst = c.Take(st, now); out.Over {
				nst = st
				if c.Ledgered() {
					out.Reset = s.soonerRelease(hashes[i], c, now, out.Reset)
				}
			}
		}
		if out.Over && c.Enforced() {
			b.Admitted = false
		}
		out.Released = b.Outcomes[i].Released
		b.Outcomes[i] = out
		start = append(start, st)
		next = append(next, nst)
	}
	if b.Admitted && b.QuotaOver(func(i int) bool { return b.Outcomes[i].Over }) {
		b.Admitted = false
	}
	if !b.Admitted && !settleRejected(b, start, next, now) {
		return nil
	}
	s.commit(b, hashes, slots, next, now)
	if b.Admitted {
		s.reserveAdmitted(b, hashes, held, now)
	}
	for _, i := range order {
		s.shards[i].sweep(now)
	}
	return nil
}

// settleLedgers applies a batch's refunds, first and whatever its
// verdict (limits.Store), and with them what reservations owe: those due
// are released (their hits in b.Outcomes[i].Released), a refund under a
// hold settles its reservation, and a reservation under a hold that
// holds one already takes nothing. It returns, by check, heldAgain or
// ledgerFull for such reservations, or nil if there are none.
// Requires the checks' shards locked.
func (s *Store) settleLedgers(b *limits.Batch, hashes []uint64, now int64) []uint8 {
	var held []uint8
	for i := range b.Checks {
		c := &b.Checks[i]
		switch {
		case c.Ledgered():
			released, h := s.reservation(hashes[i], c, now)
			if released > 0 || h != 0 {
				if held == nil {
					held = make([]uint8, len(b.Checks))
				}
				held[i] = h
				b.Outcomes[i].Released = released
			}
		case c.Refunds():
			s.refund(hashes[i], c, now)
		}
	}
	return held
}

// evaluateSettled decides check c on st, its key's working copy, when
// it is a refund, usage, or a reservation settleLedgers found held
// (held is heldAgain or ledgerFull), and returns its outcome and the
// state it leaves if the batch is admitted (st itself when it takes
// nothing). Requires c's shard locked.
func (s *Store) evaluateSettled(c *limits.Check, hash uint64, held uint8, st limits.State, now int64) (out limits.Outcome, nst limits.State) {
	nst = st
	switch {
	case c.Refund:
		out = refunded(c, st, now)
	case c.Usage:
		out, nst = c.Limit.EvaluateUsage(st, now, c.Hits)
	case held == ledgerFull:
		out = limits.Outcome{Over: true, Reset: s.soonerRelease(hash, c, now, time.Duration(math.MaxInt64))}
	case held == heldAgain:
		// A retried reservation holds what it took: never over.
		if out = probe(c, st, now); out.Over {
			out.Over, out.Reset = false, s.soonerRelease(hash, c, now, out.Reset)
		}
	}
	return out, nst
}

// reserveAdmitted records the reservations of an admitted batch: each
// check that reserves and took hits, unless settleLedgers found it
// held. Requires the checks' shards locked.
func (s *Store) reserveAdmitted(b *limits.Batch, hashes []uint64, held []uint8, now int64) {
	for i := range b.Checks {
		if c := &b.Checks[i]; c.Reserves() && !c.Refund && !c.Usage && c.Hits > 0 && (held == nil || held[i] == 0) {
			s.reserve(hashes[i], c, now)
		}
	}
}

// settleRejected sets the outcomes and working copies of a rejected
// batch: nothing is consumed, so the limits that would have admitted
// report their state without the request's hits, as they started, except
// that usage checks consume theirs. A usage check starts again from the
// state before the batch, or from this pass's copy of the last earlier
// check on its key, so that it sees the earlier usage checks' hits on its
// key and no other's; every other check passes that state on. It reports
// whether a usage check consumed hits, so that the batch has state to
// write.
func settleRejected(b *limits.Batch, start, next []limits.State, now int64) (charged bool) {
	uses := slices.ContainsFunc(b.Checks, func(c limits.Check) bool { return c.Usage && c.Hits > 0 })
	for i := range b.Checks {
		c := &b.Checks[i]
		switch {
		case c.Refund:
			b.Outcomes[i] = refunded(c, start[i], now)
		case !b.Outcomes[i].Over && !c.Usage:
			b.Outcomes[i] = probe(c, start[i], now)
		}
		if !uses {
			continue
		}
		st := start[i]
		for j := i - 1; j >= 0; j-- {
			if b.Checks[j].Key == c.Key {
				st = next[j]
				break
			}
		}
		next[i] = st
		if c.Usage {
			b.Outcomes[i], next[i] = c.Limit.EvaluateUsage(st, now, c.Hits)
			charged = charged || c.Hits > 0
		}
	}
	return charged
}

// refunded returns the outcome of refund c on st, the state after every
// refund of the batch: the limit as it stands, never Over.
func refunded(c *limits.Check, st limits.State, now int64) limits.Outcome {
	out := probe(c, st, now)
	out.Over = false
	return out
}

// probe returns what c's limit says of st for zero hits: whether c's
// request could be admitted now, by its hold on a concurrency limit.
func probe(c *limits.Check, st limits.State, now int64) limits.Outcome {
	if c.Limit.Algorithm == limits.Concurrency {
		out, _ := c.Limit.Occupy(st, now, c.Hold, 0)
		return out
	}
	out, _ := c.Limit.Evaluate(st, now, 0)
	return out
}

// refund gives c's hits back to the stored state of its key
// (limits.Limit.Refund). A key the ghost table remembers gets its
// remembered state back, less the refund: that state errs only on the
// strict side, and a refund keeps it so.
// requires the key's shard locked
func (s *Store) refund(hash uint64, c *limits.Check, now int64) {
	s.giveBack(hash, c, now, c.GiveBack)
}

// giveBack is refund, with back to give the hits back.
// requires the key's shard locked
func (s *Store) giveBack(hash uint64, c *limits.Check, now int64, back func(limits.State, int64) limits.State) {
	sh := &s.shards[s.shardOf(hash)]
	if j, ok := sh.m[c.Key]; ok {
		e := &sh.keys[j]
		if e.st = back(e.st, now); e.st.Expire <= now {
			sh.remove(j)
		}
		return
	}
	if sh.ghost == nil {
		return
	}
	st, ok := sh.ghost.start(hash, c.Limit, now)
	if !ok {
		return
	}
	sh.ghostStarts++
	if st = back(st, now); st.Expire > now {
		sh.makeRoom(weight(c.Key), now)
		sh.insert(entry{key: c.Key, hash: hash, st: st, lim: c.Limit, used: now})
	}
}

// lock locks every shard that checks touch, in ascending order so that
// two batches can never wait on each other. It returns each check's key
// hash (appended to hashes) and the shards locked, in order (appended to
// order).
func (s *Store) lock(checks []limits.Check, hashes []uint64, order []uint16) ([]uint64, []uint16) {
	for i := range checks {
		h := maphash.String(s.seed, checks[i].Key)
		hashes = append(hashes, h)
		order = append(order, s.shardOf(h))
	}
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	return hashes, order
}

// commit writes each key of an admitted batch once, from the working copy
// of its last check, if any of its checks consumed hits. slots are where
// lookup found each key (-1: not stored), unless an eviction since moved
// it out.
// requires the batch's shards locked
func (s *Store) commit(b *limits.Batch, hashes []uint64, slots []int32, next []limits.State, now int64) {
	for i := range b.Checks {
		c := &b.Checks[i]
		if laterSameKey(b.Checks, i) || !consumed(b, i) {
			continue
		}
		sh := &s.shards[s.shardOf(hashes[i])]
		j := slots[i]
		if j >= 0 && sh.keys[j].key != c.Key {
			// Evicted to make room for an earlier check of the batch.
			j = -1
		}
		switch {
		case next[i].Expire <= now:
			if j >= 0 {
				sh.remove(j)
			}
		case j >= 0:
			e := &sh.keys[j]
			e.st, e.lim, e.used = next[i], c.Limit, now
		default:
			sh.makeRoom(weight(c.Key), now)
			sh.insert(entry{key: c.Key, hash: hashes[i], st: next[i], lim: c.Limit, used: now})
		}
	}
}

// lookup returns the state check c starts from: the working copy of the
// last earlier check with the same key, else the stored state, else what
// the ghost table remembers of the key. It also returns the key's slot,
// or -1 if the shard does not hold it; earlierSlots are the earlier
// checks'.
// requires the key's shard locked
func (s *Store) lookup(hash uint64, c *limits.Check, earlier []limits.Check, next []limits.State, earlierSlots []int32, now int64) (limits.State, int32) {
	for j := len(earlier) - 1; j >= 0; j-- {
		if earlier[j].Key == c.Key {
			return next[j], earlierSlots[j]
		}
	}
	sh := &s.shards[s.shardOf(hash)]
	if j, ok := sh.m[c.Key]; ok {
		e := &sh.keys[j]
		e.used = now
		return e.st, j
	}
	if sh.ghost == nil {
		return limits.State{}, -1
	}
	st, ok := sh.ghost.start(hash, c.Limit, now)
	if ok {
		sh.ghostStarts++
	}
	return st, -1
}

// consumed reports whether check i or an earlier check with its key
// consumed hits: a usage check always does, any other only in an
// admitted batch, if it was not over.
func consumed(b *limits.Batch, i int) bool {
	for j := 0; j <= i; j++ {
		c, out := &b.Checks[j], &b.Outcomes[j]
		if c.Key != b.Checks[i].Key {
			continue
		}
		if c.Refund {
			continue // given back before the batch
		}
		if (c.Usage && c.Hits > 0) || (b.Admitted && !out.Over && (c.Hits > 0 || out.Granted > 0)) {
			return true
		}
	}
	return false
}

// laterSameKey reports whether a later check shares check i's key; its
// working copy then already includes check i's hits.
func laterSameKey(cs []limits.Check, i int) bool {
	for j := i + 1; j < len(cs); j++ {
		if cs[j].Key == cs[i].Key {
			return true
		}
	}
	return false
}

func (s *Store) shardOf(hash uint64) uint16 {
	return uint16(hash % s.n)
}

// weight is how many keys key counts as toward the cap.
func weight(key string) int {
	return 1 + (max(len(key), 1)-1)/keyUnit
}

// makeRoom evicts keys from sh until a key of weight w fits, or sh is
// empty. Expired keys go first: the sweep runs if it is due, and an
// expired candidate goes before any live one. Otherwise the least
// recently used of evictSample candidates, taken in turn from where the
// last eviction stopped, goes, and its state into the ghost table.
// requires sh.mu held
func (sh *shard) makeRoom(w int, now int64) {
	if sh.used+w > sh.max {
		sh.sweep(now)
	}
	for sh.used+w > sh.max && len(sh.m) > 0 {
		victim := int32(-1)
		for seen, tries := 0, 0; seen < evictSample && tries < len(sh.keys); tries++ {
			if sh.hand >= len(sh.keys) {
				sh.hand = 0
			}
			e := &sh.keys[sh.hand]
			sh.hand++
			if e.lim == nil {
				continue // a free slot
			}
			seen++
			if e.st.Expire <= now {
				victim = int32(sh.hand - 1)
				break
			}
			if victim < 0 || e.used < sh.keys[victim].used {
				victim = int32(sh.hand - 1)
			}
		}
		e := &sh.keys[victim]
		if e.st.Expire > now && !e.ledger {
			if sh.ghost == nil {
				sh.ghost = newGhost(sh.ghostSets)
			}
			sh.ghost.add(e.hash, e.lim, e.st, now)
			sh.evictions++
		}
		sh.remove(victim)
	}
}

// insert stores a key that the shard does not hold.
// requires sh.mu held
func (sh *shard) insert(e entry) {
	var j int32
	if n := len(sh.free); n > 0 {
		j = sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.keys[j] = e
	} else {
		j = int32(len(sh.keys))
		sh.keys = append(sh.keys, e)
	}
	sh.m[e.key] = j
	sh.used += weight(e.key)
}

// remove drops the key in slot j.
// requires sh.mu held
func (sh *shard) remove(j int32) {
	delete(sh.m, sh.keys[j].key)
	sh.used -= weight(sh.keys[j].key)
	sh.keys[j] = entry{}
	sh.free = append(sh.free, j)
}

// sweep drops expired state at most once per sweepEvery.
// requires sh.mu held
func (sh *shard) sweep(now int64) {
	if now < sh.nextSweep {
		return
	}
	sh.nextSweep = now + sweepEvery.Microseconds()
	for j := range sh.keys {
		if e := &sh.keys[j]; e.lim != nil && e.st.Expire <= now {
			sh.remove(int32(j))
		}
	}
}

// Len returns how many keys the store holds, expired or not yet swept.
func (s *Store) Len() int {
	return int(s.sum(func(sh *shard) uint64 { return uint64(len(sh.m)) }))
}

// Evictions returns how many live keys the store has evicted to stay
// within Options.MaxKeys, each into the ghost table. Expired keys dropped
// to make room are not counted.
func (s *Store) Evictions() uint64 {
	return s.sum(func(sh *shard) uint64 { return sh.evictions })
}

// GhostStarts returns how many checks found their key evicted, or never
// stored, and started from what the ghost table remembers rather than
// from a fresh key's state. It bounds the checks that eviction made
// stricter: those of keys that share a ghost set with another evicted
// key, and those whose own evicted state it was.
func (s *Store) GhostStarts() uint64 {
	return s.sum(func(sh *shard) uint64 { return sh.ghostStarts })
}

func (s *Store) sum(f func(*shard) uint64) uint64 {
	var n uint64
	for i := range s.shards[:s.n] {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += f(sh)
		sh.mu.Unlock()
	}
	return n
}
