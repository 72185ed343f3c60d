package memory

import "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"

// ghostWays is how many limits one ghost set tells apart: enough for the
// per-key limits (a per-second and a per-minute limit per user, say) of
// the keys that a flood evicts.
const ghostWays = 4

// ghost is what a shard remembers of the live keys it evicted, in fixed
// space: a table of sets indexed by the key's hash. A set keeps one mark
// per limit, the union of the marks of every key evicted into it under
// that limit, so a key evicted and seen again starts from a state at
// least as full as the one it left, and never admits more than if it had
// stayed. Keys that share a set share their marks: a new key may start
// fuller than fresh, and if it is evicted in turn, brings that fullness
// back with its own hits, so under a flood of new keys a set fills in
// steps of the hits each took. That under-admission is the price of
// bounded memory; it ends when the evicted keys' own state would have
// expired (see docs/memory-store.md).
type ghost struct {
	sets []ghostSet
}

type ghostSet struct {
	ways [ghostWays]ghostWay
	// h and until stand for marks pushed out of the ways by a fifth limit:
	// every key of the set starts as if it held h hits, fresh from until,
	// whatever its limit (see bound).
	h     uint64
	until int64
}

// ghostWay is the union of the marks of the keys evicted into a set under
// one limit, or any limit that CountsLike it. lim is nil if unused.
type ghostWay struct {
	lim *limits.Limit
	m   mark
}

func newGhost(sets int) *ghost {
	return &ghost{sets: make([]ghostSet, max(sets, 1))}
}

func (g *ghost) set(hash uint64) *ghostSet {
	return &g.sets[(hash>>32)%uint64(len(g.sets))]
}

// add folds the state of a key evicted under l at now into its set.
func (g *ghost) add(hash uint64, l *limits.Limit, st limits.State, now int64) {
	m := markOf(l, st, now)
	if m.expire <= now {
		return
	}
	gs := g.set(hash)
	free := -1
	for i := range gs.ways {
		w := &gs.ways[i]
		switch {
		case w.lim == nil || w.m.expire <= now:
			if free < 0 {
				free = i
			}
		case w.lim.CountsLike(l):
			w.m = union(l, w.m, m, now)
			return
		}
	}
	if free < 0 {
		// Every way is live under another limit: push out the one that
		// expires first, into the bound that holds for every key.
		free = 0
		for i := range gs.ways {
			if gs.ways[i].m.expire < gs.ways[free].m.expire {
				free = i
			}
		}
		w := &gs.ways[free]
		if gs.until <= now {
			gs.h, gs.until = 0, 0
		}
		gs.h = max(gs.h, w.m.hits(w.lim))
		gs.until = max(gs.until, w.m.expire)
	}
	gs.ways[free] = ghostWay{lim: l, m: m}
}

// start returns the state a key not in the shard starts from under l at
// now, and whether it is other than a fresh key's.
func (g *ghost) start(hash uint64, l *limits.Limit, now int64) (limits.State, bool) {
	gs := g.set(hash)
	var m mark
	for i := range gs.ways {
		w := &gs.ways[i]
		switch {
		case w.lim == nil || w.m.expire <= now:
		case w.lim.CountsLike(l):
			m = union(l, m, w.m, now)
		case w.lim.ID() == l.ID():
			// The key's limit may have had these numbers before a reload;
			// a key's algorithm and window (its limit ID) are part of it, so no other
			// way can hold its state.
			m = union(l, m, bound(l, w.m.hits(w.lim), w.m.expire, now), now)
		}
	}
	m = union(l, m, bound(l, gs.h, gs.until, now), now)
	if m.expire <= now {
		return limits.State{}, false
	}
	return m.state(l, now), true
}
