package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// benchKeys decides one check per request on a store with the default
// options, with keys made by key from a goroutine number and a count, and
// reports the heap the store holds afterwards. The limit is far above the
// load and the window long, so every request is admitted and its key stays
// live for the whole run.
func benchKeys(b *testing.B, key func(buf []byte, g, i int64) []byte) {
	l, err := limits.NewLimit(limits.FixedWindow, 1<<40, limits.UnitHour, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	before := heapInUse()
	s := memory.New(memory.Options{})
	var goroutines atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := goroutines.Add(1)
		var buf []byte
		batch := &limits.Batch{Checks: make([]limits.Check, 1)}
		for i := int64(0); pb.Next(); i++ {
			buf = key(buf[:0], g, i)
			batch.Checks[0] = limits.Check{Key: string(buf), Limit: l, Hits: 1}
			if err := s.Apply(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(heapInUse()-before)/(1<<20), "heap-MiB")
	runtime.KeepAlive(s)
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// userKey appends a store key like the engine's for a per-user limit.
func userKey(buf, user []byte) []byte {
	buf = append(buf, "{4:edge6:tenant2:t1}4:user"...)
	buf = strconv.AppendInt(buf, int64(len(user)), 10)
	buf = append(buf, ':')
	buf = append(buf, user...)
	return append(buf, "14:fixed_window/3600"...)
}

// BenchmarkFewKeys is the normal workload: 1000 users, each seen often.
func BenchmarkFewKeys(b *testing.B) {
	benchKeys(b, func(buf []byte, g, i int64) []byte {
		var u [24]byte
		return userKey(buf, strconv.AppendInt(append(u[:0], 'u'), (g*7919+i)%1000, 10))
	})
}

// BenchmarkUniqueKeyFlood is an attack: every request is a new user, as a
// client that sends a new header value each time makes it. Run it with
// -benchtime=1000000x for the heap after a flood of a million keys.
func BenchmarkUniqueKeyFlood(b *testing.B) {
	benchKeys(b, func(buf []byte, g, i int64) []byte {
		var u [48]byte
		return userKey(buf, strconv.AppendInt(append(strconv.AppendInt(append(u[:0], 'g'), g, 10), '-'), i, 10))
	})
}

// BenchmarkHeapPerKey reports the heap a full store costs per key it
// holds, the keys' bytes and the ghost table included: b.N is MaxKeys, and
// twice as many keys are sent. It does so for keys like the engine's and
// for keys of 256 bytes, the longest that count as one toward MaxKeys.
// Run it with -benchtime=65536x.
func BenchmarkHeapPerKey(b *testing.B) {
	l, err := limits.NewLimit(limits.FixedWindow, 1<<40, limits.UnitHour, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{0, 256} {
		b.Run(fmt.Sprint("key_", n), func(b *testing.B) {
			key := func(buf []byte, i int) []byte {
				buf = userKey(buf[:0], fmt.Appendf(nil, "%07d", i))
				if pad := n - len(buf); pad > 0 {
					buf = userKey(buf[:0], fmt.Appendf(nil, "%s%07d", strings.Repeat("v", pad), i))
					buf = userKey(buf[:0], fmt.Appendf(nil, "%s%07d", strings.Repeat("v", pad-(len(buf)-n)), i))
				}
				return buf
			}
			before := heapInUse()
			s := memory.New(memory.Options{MaxKeys: b.N})
			batch := &limits.Batch{Checks: make([]limits.Check, 1)}
			var buf []byte
			for i := range 2 * b.N {
				buf = key(buf, i)
				batch.Checks[0] = limits.Check{Key: string(buf), Limit: l, Hits: 1}
				if err := s.Apply(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(heapInUse()-before)/float64(s.Len()), "heap-B/key")
			b.ReportMetric(float64(s.Len())/float64(b.N), "full")
			b.ReportMetric(float64(len(buf)), "key-B")
			runtime.KeepAlive(s)
		})
	}
}
