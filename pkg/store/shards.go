package store

import "hash/maphash"

// shardCount is the number of shards of the deny cache's and the leases'
// maps: enough that 64 request goroutines seldom meet on one lock.
const shardCount = 64

// shards spreads string keys over shardCount shards of type S (a map and
// its lock) by a hash seeded per process, so that no client can aim its
// keys at one shard. The deny cache and the leases share it; the memory
// store has its own, sized by its key bound and locked in order across a
// batch.
type shards[S any] struct {
	seed maphash.Seed
	all  [shardCount]S
}

func newShards[S any]() shards[S] { return shards[S]{seed: maphash.MakeSeed()} }

// of returns the shard of key.
func (s *shards[S]) of(key string) *S {
	return &s.all[maphash.String(s.seed, key)%shardCount]
}
