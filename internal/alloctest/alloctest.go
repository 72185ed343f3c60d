// Package alloctest measures what a piece of code allocates, for tests
// that bound a cost in bytes rather than in time, which a busy machine
// cannot fail.
package alloctest

import (
	"runtime"
	"sync"
)

// Bytes returns the bytes f allocates: the least of three runs, so that
// a GC's own allocations or a stray goroutine's do not count.
func Bytes(f func()) uint64 {
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// Once returns the bytes one run of f allocates, for code whose first
// run costs what the next do not (a render cached after it).
func Once(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Concurrently runs f n times at once and waits for them.
func Concurrently(n int, f func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(f)
	}
	wg.Wait()
}
