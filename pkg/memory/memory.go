// Package memory is the embedded limits.Store: process-local state in
// sharded maps, deciding by the process's clock. It is the default store
// when no Redis is configured and the local fallback while Redis cannot
// decide.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

const (
	memoryShards = 256
	// sweepEvery bounds how often one shard scans for expired state.
	sweepEvery = time.Second
)

// Store is a limits.Store in this process's memory. It is safe for
// concurrent use; the zero value is not usable, call New.
//
// A batch locks the shards of its keys in shard order, so batches that
// share keys serialize and batches that don't run in parallel. Expired
// state is dropped by a sweep that each shard runs at most once per second
// while it is in use, so memory is bounded by the keys live in their
// windows.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memoryShards]shard
}

type shard struct {
	mu        sync.Mutex
	m         map[string]*limits.State // guarded by mu
	nextSweep int64                    // µs; guarded by mu
}

// Options tunes a Store. The zero value is ready to use.
type Options struct {
	// Now is the clock the store decides by; nil means time.Now.
	Now func() time.Time
}

// New returns an empty memory store.
func New(o Options) *Store {
	s := &Store{now: o.Now, seed: maphash.MakeSeed()}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*limits.State)
	}
	return s
}

// Apply implements limits.Store.
func (s *Store) Apply(_ context.Context, b *limits.Batch) error {
	n := len(b.Checks)
	b.Outcomes = slices.Grow(b.Outcomes[:0], n)[:n]
	b.Admitted = true
	if n == 0 {
		return nil
	}
	now := s.now().UnixMicro()

	var buf, obuf [16]uint16
	idx, order := s.lock(b.Checks, buf[:0], obuf[:0])
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()

	// Evaluate in order on working copies, so checks that share a key see
	// each other's hits, then write back only if the request is admitted.
	var nbuf, sbuf [16]limits.State
	next, start := nbuf[:0], sbuf[:0]
	for i := range b.Checks {
		c := &b.Checks[i]
		st := s.lookup(idx[i], c.Key, b.Checks[:i], next)
		out, nst := c.Limit.Grant(st, now, c.Hits, c.Extra)
		if out.Over {
			nst = st
			if !c.Limit.Shadow {
				b.Admitted = false
			}
		}
		b.Outcomes[i] = out
		start = append(start, st)
		next = append(next, nst)
	}
	if !b.Admitted {
		// Nothing is consumed, so the limits that would have admitted
		// report their state without this request.
		for i := range b.Checks {
			if !b.Outcomes[i].Over {
				b.Outcomes[i], _ = b.Checks[i].Limit.Evaluate(start[i], now, 0)
			}
		}
		return nil
	}
	s.commit(b, idx, next, now)
	for _, i := range order {
		s.shards[i].sweep(now)
	}
	return nil
}

// lock locks every shard that checks touch, in ascending order so that
// two batches can never wait on each other. It returns each check's shard
// (appended to idx) and the shards locked, in order (appended to order).
func (s *Store) lock(checks []limits.Check, idx, order []uint16) ([]uint16, []uint16) {
	for i := range checks {
		idx = append(idx, s.shardOf(checks[i].Key))
	}
	order = append(order, idx...)
	slices.Sort(order)
	order = slices.Compact(order)
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	return idx, order
}

// commit writes each key of an admitted batch once, from the working copy
// of its last check, if any of its checks consumed hits.
// requires the batch's shards locked
func (s *Store) commit(b *limits.Batch, idx []uint16, next []limits.State, now int64) {
	for i := range b.Checks {
		c := &b.Checks[i]
		if laterSameKey(b.Checks, i) || !consumed(b, i) {
			continue
		}
		sh := &s.shards[idx[i]]
		if next[i].Expire <= now {
			delete(sh.m, c.Key)
			continue
		}
		if p, ok := sh.m[c.Key]; ok {
			*p = next[i]
		} else {
			p := new(limits.State)
			*p = next[i]
			sh.m[c.Key] = p
		}
	}
}

// lookup returns the state a check starts from: the working copy of the
// last earlier check with the same key, else the stored state.
// requires the key's shard locked
func (s *Store) lookup(shardIdx uint16, key string, earlier []limits.Check, next []limits.State) limits.State {
	for j := len(earlier) - 1; j >= 0; j-- {
		if earlier[j].Key == key {
			return next[j]
		}
	}
	if p, ok := s.shards[shardIdx].m[key]; ok {
		return *p
	}
	return limits.State{}
}

// consumed reports whether check i or an earlier check with its key
// consumed hits.
func consumed(b *limits.Batch, i int) bool {
	for j := 0; j <= i; j++ {
		if b.Checks[j].Key == b.Checks[i].Key && (b.Checks[j].Hits > 0 || b.Outcomes[j].Granted > 0) && !b.Outcomes[j].Over {
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

func (s *Store) shardOf(key string) uint16 {
	return uint16(maphash.String(s.seed, key) % memoryShards)
}

// sweep drops expired state at most once per sweepEvery.
// requires sh.mu held
func (sh *shard) sweep(now int64) {
	if now < sh.nextSweep {
		return
	}
	sh.nextSweep = now + sweepEvery.Microseconds()
	for k, st := range sh.m {
		if st.Expire <= now {
			delete(sh.m, k)
		}
	}
}

// Len returns how many keys the store holds, expired or not yet swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].m)
		s.shards[i].mu.Unlock()
	}
	return n
}
