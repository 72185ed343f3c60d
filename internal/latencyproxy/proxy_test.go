package latencyproxy_test

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/latencyproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echo starts a server that writes back every byte it reads, closed at
// cleanup.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

// TestProxy measures round trips through the proxy: each takes at least
// the added round-trip time, and requests written back to back (a
// pipeline) are answered in order without a round trip each.
func TestProxy(t *testing.T) {
	// Long enough that a busy machine's stalls fit well inside the 9 ×
	// rtt between a pipelined round trip and ten serialized ones.
	const rtt = 100 * time.Millisecond
	p, err := latencyproxy.Start(echo(t), rtt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(lines ...string) time.Duration {
		t.Helper()
		start := time.Now()
		for _, l := range lines {
			if _, err := io.WriteString(c, l+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range lines {
			got, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if got != l+"\n" {
				t.Fatalf("read %q, want %q", got, l+"\n")
			}
		}
		return time.Since(start)
	}
	for range 3 {
		if took := roundTrip("ping"); took < rtt {
			t.Errorf("a round trip took %v, want at least %v", took, rtt)
		}
	}
	// Ten requests in a pipeline take one round trip, not ten: at most
	// 2 × rtt, with room for a slow machine.
	lines := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	if took := roundTrip(lines...); took < rtt || took >= 10*rtt {
		t.Errorf("a pipeline of %d took %v, want from %v to one round trip per request", len(lines), took, rtt)
	}
}

// TestProxyClose closes the proxy with a connection open: the client
// sees its connection end, and no goroutine is left behind (goleak).
func TestProxyClose(t *testing.T) {
	p, err := latencyproxy.Start(echo(t), time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("read after Close succeeded, want the connection closed")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
