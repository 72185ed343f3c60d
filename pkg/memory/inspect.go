package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Inspect returns the state that the next check of key under l starts
// from, and the store's time, for diagnostics: what the store holds for
// the key, else, for a key that was evicted, what the ghost table makes
// it start from (see Store), else the zero state of a fresh key. It
// changes nothing, not even the key's recency.
func (s *Store) Inspect(_ context.Context, key string, l *limits.Limit) (limits.State, time.Time, error) {
	now := s.now()
	h := maphash.String(s.seed, key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if j, ok := sh.m[key]; ok {
		st := sh.keys[j].st
		st.Log = slices.Clone(st.Log) // the store's array changes under its lock
		return st, now, nil
	}
	if sh.ghost != nil {
		if st, ok := sh.ghost.start(h, l, now.UnixMicro()); ok {
			return st, now, nil
		}
	}
	return limits.State{}, now, nil
}

// Reset deletes key's state and reports whether the store held any. What
// the ghost table remembers of keys evicted before is shared among keys
// and stays: a key that was evicted may still start fuller than fresh
// until that expires.
func (s *Store) Reset(_ context.Context, key string, _ *limits.Limit) (bool, error) {
	sh := &s.shards[s.shardOf(maphash.String(s.seed, key))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	j, ok := sh.m[key]
	if !ok {
		return false, nil
	}
	sh.remove(j)
	return true, nil
}
