package statsd_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// BenchmarkFlush: one flush of the stats of 200 rules that all saw
// traffic, over UDP to a socket that does not read (datagrams dropped by
// the kernel, as with a receiver that is too slow). It runs in the sink's
// goroutine every --statsd-flush-interval, never on a decision's path.
func BenchmarkFlush(b *testing.B) {
	const n = 200
	var rules strings.Builder
	rules.WriteString("domain: edge\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&rules, "  - key: k%d\n    rate_limit: {unit: minute, requests_per_unit: 100}\n", i)
	}
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules.String())}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "bench"}, 0.8, metrics.DefaultMaxValues)
	clk := storetest.NewClock(storetest.Epoch)
	e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{Observer: m})
	decide := func(i int) {
		var d limits.Decision
		req := &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: fmt.Sprintf("k%d", i%n), Value: "v"}}}}}
		if err := e.Decide(context.Background(), req, &d); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		decide(i)
	}
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	sk, err := statsd.New(statsd.Options{Addr: sink.LocalAddr().String(), Network: "udp", Source: metrics.NewReference(m.Registry, e.Rules)})
	if err != nil {
		b.Fatal(err)
	}
	defer sk.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// Every rule's stats change, so every line is sent.
		b.StopTimer()
		for range n {
			decide(i)
			i++
		}
		b.StartTimer()
		if err := sk.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}
