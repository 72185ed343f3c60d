package store

import (
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// What the middleware puts in limits.Batch.DecidedBy when it answers a
// batch itself.
const (
	// DecidedByDenyCache: a DenyCache rejected the batch without calling
	// its store.
	DecidedByDenyCache = "deny_cache"
	// DecidedByLease: Leases admitted every leased check from local
	// leases, and no other check needed the store.
	DecidedByLease = "lease"
)

// DenyEntry is what a DenyCache remembers of one key: until Until, a
// check of the key against a limit that counts like Limit and needs
// Probe or more hits is over.
type DenyEntry struct {
	Limit *limits.Limit
	Probe uint64
	Until time.Time
}

// Entry returns what the cache remembers of key, if that has not expired,
// for diagnostics.
func (c *DenyCache) Entry(key string) (DenyEntry, bool) {
	now := c.now()
	sh := c.shards.of(key)
	sh.mu.RLock()
	e, ok := sh.m[key]
	sh.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return DenyEntry{}, false
	}
	return DenyEntry{Limit: e.limit, Probe: e.probe, Until: e.until}, true
}

// LeaseState is what Leases holds of one key: Held hits to admit locally
// until Until, taken under a limit that counts like Limit.
type LeaseState struct {
	Limit *limits.Limit
	Held  uint64
	Until time.Time
}

// Lease returns the live lease of key, for diagnostics.
func (l *Leases) Lease(key string) (LeaseState, bool) {
	now := l.now()
	sh := l.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[key]
	if ls == nil || !now.Before(ls.until) {
		return LeaseState{}, false
	}
	return LeaseState{Limit: ls.limit, Held: ls.avail, Until: ls.until}, true
}

// Drop ends key's lease, if it has a live one, and returns the hits it
// held. They are not given back to the store: call Drop when the key's
// counter was reset there, which already freed them. A refill under way
// for the key grants nothing to the dropped lease; the next request starts
// a new one.
func (l *Leases) Drop(key string) (held uint64, ok bool) {
	now := l.now()
	sh := l.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[key]
	if ls == nil {
		return 0, false
	}
	ls.endRefill()
	delete(sh.m, key)
	if !now.Before(ls.until) {
		return 0, false
	}
	return ls.avail, true
}
