package xds_test

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// largeWait bounds the wait for a large push: generous for a busy
// machine under the race detector. Before pushes were rendered as nodes,
// a 100,000-descriptor push was neither applied nor refused in 240 s.
const largeWait = 90 * time.Second

// heapPeak samples the heap in use until stop is called, which returns
// the highest sample above the heap in use at the start.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapInuse
	var peak atomic.Uint64
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
				peak.Store(m.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak.Load()
	}
}

// awaitAppliedWithin waits up to d for the next OnApply report.
func (c *client) awaitAppliedWithin(t *testing.T, d time.Duration) applied {
	t.Helper()
	select {
	case a := <-c.applied:
		return a
	case <-time.After(d):
		t.Fatalf("no push applied or rejected within %v", d)
		return applied{}
	}
}

// largeHeap bounds the heap that TestLargePush's push may take above
// the test's start, the server's share included: 200 MiB as measured,
// with room for the GC's timing. Rendered as YAML text, the push peaked
// at 1,157 MiB.
const largeHeap = 512 << 20

// TestLargePush: a push of 100,000 descriptors (2.2 MB), through
// go-control-plane's own server and snapshot cache, is applied and ACKed,
// its rules decide, and the heap it takes on the way stays within
// largeHeap.
func TestLargePush(t *testing.T) {
	if testing.Short() {
		t.Skip("a 100,000-descriptor push")
	}
	const n = 100_000
	cfg := flatConfig(n)
	srv := xdstest.Start(t)
	c := startClient(t, fast(xds.Options{Server: srv.Addr}))
	peak := heapPeak()
	start := time.Now()
	srv.Set(t, node, "1", cfg)
	a := c.awaitAppliedWithin(t, largeWait)
	took, held := time.Since(start), peak()
	t.Logf("%d descriptors (%d bytes): applied in %v, heap in use peaked %d MiB above the start", n, proto.Size(cfg), took.Round(time.Millisecond), held>>20)
	if a.err != nil {
		t.Fatalf("push refused: %v", a.err)
	}
	if held > largeHeap {
		t.Errorf("heap in use peaked %d MiB above the start, want at most %d MiB", held>>20, largeHeap>>20)
	}
	srv.Await(t, 0, "ACKing version 1", isACK("1"))
	for _, user := range []string{"u0", "u99999"} {
		if r := c.engine.Rules().Match("edge", []limits.Entry{{Key: "user", Value: user}}); r == nil {
			t.Errorf("no rule for user %s after the push", user)
		}
	}
}

// TestDeepPush: a push nested 9,990 deep is NACKed, saying how deep
// descriptors may nest and where they go deeper, and is refused before
// its tree is built: it renders as no YAML at all. (It used to render as
// 1 GB of YAML, peaking at 3.3 GB of heap, and was NACKed for "invalid
// YAML: exceeded max depth of 10000".)
func TestDeepPush(t *testing.T) {
	cfg := deepConfig(9_990)
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	c := startClient(t, fast(xds.Options{Server: srv.Addr}))
	c.awaitApplied(t)
	good := c.engine.Rules().Checksum

	peak := heapPeak()
	srv.Set(t, node, "2", cfg)
	nack, _ := srv.Await(t, 0, "NACKing the deep push", isNACK)
	held := peak()
	t.Logf("%d levels (%d bytes): NACKed; heap in use peaked %d KiB above the start", 9_990, proto.Size(cfg), held>>10)
	msg := nack.GetErrorDetail().GetMessage()
	want := ".descriptors[0]: descriptors nested more than 31 levels deep"
	if !strings.HasPrefix(msg, `RateLimitConfig "edge": descriptors[0]`) || !strings.HasSuffix(msg, want) || strings.Count(msg, "descriptors[0]") != 32 {
		t.Errorf("error_detail %.200q, want the path of the 32nd level and %q", msg, want)
	}
	if got := c.engine.Rules().Checksum; got != good {
		t.Errorf("rules in use changed to %s", got)
	}
}
