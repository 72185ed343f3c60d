package metrics

// CacheLen returns the number of (rule, limit) entries cached for the
// ruleset in use.
func CacheLen(m *Metrics) int {
	c := m.cache.Load()
	if c == nil {
		return 0
	}
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	return n
}
