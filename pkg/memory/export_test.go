package memory

import "hash/maphash"

// Holds reports whether the store holds key, for tests that must know a
// key was evicted.
func (s *Store) Holds(key string) bool {
	sh := &s.shards[s.shardOf(maphash.String(s.seed, key))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[key]
	return ok
}
