package main

import (
	"runtime"
	"testing"
	"time"
)

// BenchmarkHalfOpenStreams reports what 20,000 half-open streams (HEADERS
// sent, no message, no END_STREAM) on one connection cost the server:
// goroutines, and heap plus stack in use, over an idle sidecar; and how
// long shutdown then takes. It is issue 15's probe, run for figures, not a
// timed assertion:
//
//	go test -run '^$' -bench HalfOpenStreams -benchtime 1x ./cmd/ratelimit-sidecar/
func BenchmarkHalfOpenStreams(b *testing.B) {
	const streams = 20000
	for b.Loop() {
		s := startSidecar(b, "--config", "../../config/")
		g0, m0 := usage()
		c := dialH2(b, s.grpcAddr)
		c.open(b, rlsMethod, streams)
		c.sync(b) // the server has read every HEADERS frame
		g1, m1 := usage()
		c.mu.Lock()
		refused := c.refused
		c.mu.Unlock()
		start := time.Now()
		if err := s.stop(); err != nil {
			b.Error(err)
		}
		b.ReportMetric(float64(g1-g0), "goroutines")
		b.ReportMetric(float64(m1-m0)/(1<<20), "MiB")
		b.ReportMetric(float64(refused), "refused")
		b.ReportMetric(time.Since(start).Seconds(), "s-shutdown")
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
