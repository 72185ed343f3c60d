package rlqstest

import "sync"

// Metrics counts what an RLQS server reports to its rlqs.Metrics, for
// tests: actions sent by "action/reason", hits granted, buckets, streams
// and pushes. It is safe for concurrent use.
type Metrics struct {
	mu       sync.Mutex
	assigned map[string]int
	granted  uint64
	buckets  int
	streams  int
	pushes   int
	returned uint64
}

// Streams implements rlqs.Metrics.
func (m *Metrics) Streams(d int) { m.mu.Lock(); m.streams += d; m.mu.Unlock() }

// Buckets implements rlqs.Metrics.
func (m *Metrics) Buckets(d int) { m.mu.Lock(); m.buckets += d; m.mu.Unlock() }

// Usage implements rlqs.Metrics.
func (m *Metrics) Usage(string, uint64, uint64) {}

// Assigned implements rlqs.Metrics.
func (m *Metrics) Assigned(_, action, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.assigned == nil {
		m.assigned = map[string]int{}
	}
	m.assigned[action+"/"+reason]++
}

// Granted implements rlqs.Metrics.
func (m *Metrics) Granted(_ string, hits uint64, _ bool) {
	m.mu.Lock()
	m.granted += hits
	m.mu.Unlock()
}

// Pushed implements rlqs.Metrics.
func (m *Metrics) Pushed() { m.mu.Lock(); m.pushes++; m.mu.Unlock() }

// Count returns how many actions were sent as "action/reason", for
// example "token_bucket/grant".
func (m *Metrics) Count(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assigned[key]
}

// Assignments returns a copy of the counts by "action/reason".
func (m *Metrics) Assignments() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[string]int, len(m.assigned))
	for k, v := range m.assigned {
		c[k] = v
	}
	return c
}

// Pushes returns the messages pushed between reports.
func (m *Metrics) Pushes() int { m.mu.Lock(); defer m.mu.Unlock(); return m.pushes }

// BucketsHeld returns the buckets the server holds.
func (m *Metrics) BucketsHeld() int { m.mu.Lock(); defer m.mu.Unlock(); return m.buckets }

// Returned implements rlqs.Metrics.
func (m *Metrics) Returned(_ string, hits uint64) { m.mu.Lock(); m.returned += hits; m.mu.Unlock() }

// ReturnedHits returns the hits given back to the store.
func (m *Metrics) ReturnedHits() uint64 { m.mu.Lock(); defer m.mu.Unlock(); return m.returned }
