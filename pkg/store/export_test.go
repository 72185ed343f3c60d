package store

// Held returns how many leased hits l holds for key, for the tests.
func (l *Leases) Held(key string) uint64 {
	sh := l.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ls := sh.m[key]; ls != nil && l.now().Before(ls.until) {
		return ls.avail
	}
	return 0
}
