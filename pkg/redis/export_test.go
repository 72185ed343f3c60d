package redis

import goredis "github.com/redis/go-redis/v9"

// Slot returns the hash slot of key, for tests.
func Slot(key string) uint16 { return slot("", key) }

// SlotWithPrefix returns the hash slot of prefix+key, for tests.
func SlotWithPrefix(prefix, key string) uint16 { return slot(prefix, key) }

// AddHook adds h to the store's go-redis client, for tests that watch what
// the store sends.
func AddHook(s *Store, h goredis.Hook) { s.rdb.AddHook(h) }

// Inflight returns how many round trips the store's pipe has out.
func Inflight(s *Store) int {
	s.pipe.mu.Lock()
	defer s.pipe.mu.Unlock()
	return s.pipe.out
}
