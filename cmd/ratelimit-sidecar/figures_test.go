package main

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkHalfOpenStreams reports what half-open streams (HEADERS sent,
// no message, no END_STREAM) cost the server: goroutines, and heap plus
// stack in use, over an idle sidecar; how many the server refused; and
// how long shutdown then takes. It is issue 15's probe (20,000 streams on
// one connection), and the most the default bounds let in (64 connections
// of 100 streams), run for figures, not timed assertions:
//
//	go test -run '^$' -bench HalfOpenStreams -benchtime 1x ./cmd/ratelimit-sidecar/
func BenchmarkHalfOpenStreams(b *testing.B) {
	for _, bb := range []struct{ conns, streams int }{{1, 20000}, {64, 200}} {
		b.Run(fmt.Sprintf("conns=%d/streams=%d", bb.conns, bb.streams), func(b *testing.B) {
			for b.Loop() {
				s := startSidecar(b, "--config", "../../config/")
				g0, m0 := usage()
				var conns []*rawH2
				for range bb.conns {
					c := dialH2(b, s.grpcAddr)
					c.open(b, rlsMethod, bb.streams)
					conns = append(conns, c)
				}
				refused := 0
				for _, c := range conns {
					c.sync(b) // the server has read every HEADERS frame
					c.mu.Lock()
					refused += c.refused
					c.mu.Unlock()
				}
				g1, m1 := usage()
				start := time.Now()
				if err := s.stop(); err != nil {
					b.Error(err)
				}
				b.ReportMetric(float64(g1-g0), "goroutines")
				b.ReportMetric(float64(m1-m0)/(1<<20), "MiB")
				b.ReportMetric(float64(refused), "refused")
				b.ReportMetric(time.Since(start).Seconds(), "s-shutdown")
			}
		})
	}
}

// usage returns the number of goroutines and the bytes of heap and stack
// in use, after a collection.
func usage() (int, int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), int64(m.HeapInuse + m.StackInuse)
}
