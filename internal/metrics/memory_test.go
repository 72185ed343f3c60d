package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

type memoryStats struct{}

func (memoryStats) Len() int            { return 7 }
func (memoryStats) Evictions() uint64   { return 3 }
func (memoryStats) GhostStarts() uint64 { return 2 }

func TestMemoryStoreMetrics(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	m.MemoryStore("local", memoryStats{})
	want := `
# HELP ratelimit_sidecar_memory_store_evictions_total Live keys a memory store evicted to stay within --memory-max-keys, each folded into its ghost table.
# TYPE ratelimit_sidecar_memory_store_evictions_total counter
ratelimit_sidecar_memory_store_evictions_total{store="local"} 3
# HELP ratelimit_sidecar_memory_store_ghost_starts_total Checks of keys a memory store did not hold that started from its ghost table rather than fresh: each may have been stricter than if nothing had been evicted.
# TYPE ratelimit_sidecar_memory_store_ghost_starts_total counter
ratelimit_sidecar_memory_store_ghost_starts_total{store="local"} 2
# HELP ratelimit_sidecar_memory_store_keys Keys a memory store holds, expired ones not yet swept included.
# TYPE ratelimit_sidecar_memory_store_keys gauge
ratelimit_sidecar_memory_store_keys{store="local"} 7
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"ratelimit_sidecar_memory_store_evictions_total", "ratelimit_sidecar_memory_store_ghost_starts_total", "ratelimit_sidecar_memory_store_keys"); err != nil {
		t.Error(err)
	}
}
