package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
)

// TestHalfOpenStreams is issue 15's probe, smaller: thousands of streams
// on one connection that send HEADERS and nothing more. With the default
// bounds the server refuses all but --grpc-max-streams of them, holds few
// goroutines and little memory for those, answers other clients, ends
// the ones it took after --grpc-request-timeout, and stops well within
// --shutdown-timeout with such streams open.
func TestHalfOpenStreams(t *testing.T) {
	const (
		n          = 5000
		maxStreams = 100 // --grpc-max-streams's default
		// What the streams the server takes may cost: a goroutine each
		// at most, and well under 16 MiB. Without a bound, 5,000 streams
		// held 5,000 goroutines and 32 MiB.
		maxGoroutines = maxStreams + 30
		maxBytes      = 16 << 20
	)
	s := startSidecar(t, "--config", "../../config/")
	g0, m0 := usage()
	c := dialH2(t, s.grpcAddr)
	start := time.Now()
	ids := c.open(t, rlsMethod, n)
	c.sync(t)
	t.Logf("%d streams opened in %v", n, time.Since(start).Round(time.Millisecond))
	if !c.wait(10*time.Second, func() bool { return c.refused >= n-maxStreams }) {
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("%d of %d half-open streams refused, want %d (server's SETTINGS_MAX_CONCURRENT_STREAMS: %d)", c.refused, n, n-maxStreams, c.maxStreams)
	}
	g1, m1 := usage()
	t.Logf("%d half-open streams: %d more goroutines, %.1f MiB more heap and stack", n, g1-g0, float64(m1-m0)/(1<<20))
	if g1-g0 > maxGoroutines || m1-m0 > maxBytes {
		t.Errorf("%d half-open streams hold %d goroutines and %d bytes, want at most %d and %d", n, g1-g0, m1-m0, maxGoroutines, maxBytes)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0)); err != nil {
		t.Errorf("a new client, beside the half-open streams: %v", err)
	}

	// The streams taken end with DEADLINE_EXCEEDED (4) after
	// --grpc-request-timeout (2s); half-open Watch streams, opened once
	// there is room, with CANCELLED (1).
	if !c.wait(10*time.Second, func() bool { return c.endedAll(ids) }) {
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("after 10s: streams %v; want every one ended", c.statuses(ids))
	}
	watches := c.open(t, watchMethod, 10)
	if !c.wait(10*time.Second, func() bool { return c.endedAll(watches) }) {
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("after 10s: Watch streams %v; want every one ended", c.statuses(watches))
	}
	c.mu.Lock()
	unary, watch := c.statuses(ids), c.statuses(watches)
	c.mu.Unlock()
	if want := map[string]int{"refused": n - maxStreams, "4": maxStreams}; !maps.Equal(unary, want) {
		t.Errorf("unary streams ended %v, want %v", unary, want)
	}
	if want := map[string]int{"1": len(watches)}; !maps.Equal(watch, want) {
		t.Errorf("Watch streams ended %v, want %v", watch, want)
	}

	// SIGTERM with half-open streams open: the default --shutdown-timeout
	// is 10s, which stopping once took in full.
	c.open(t, rlsMethod, maxStreams/2)
	c.open(t, watchMethod, 10)
	c.sync(t)
	start = time.Now()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown with half-open streams took %v, want under 5s", d.Round(time.Millisecond))
	}
}

// keepAlive opens a connection to addr and makes a keep-alive GET of path
// on it. If the response comes within wait, it reads it and returns the
// connection idle; otherwise, or if wait is 0, it returns the connection
// with the request outstanding and the response nil.
func keepAlive(t *testing.T, addr, path string, wait time.Duration) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: sidecar\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if wait == 0 {
		return conn, br, nil
	}
	return conn, br, readResponse(t, conn, br, wait)
}

// readResponse reads a response from conn within wait, or returns nil.
func readResponse(t *testing.T, conn net.Conn, br *bufio.Reader, wait time.Duration) *http.Response {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil
		}
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r
}

// TestHTTPConnectionCapHeld fills --http-max-conns, three times over,
// with connections that hold on: keep-alive connections that made one
// request, and connections that send nothing. The probes and a new
// client are still answered, the oldest held connections are closed to
// make room for them, and gRPC is not affected. Before the listener
// reclaimed connections, the probes waited until a held connection
// closed itself: for --idle-timeout (1m) or the header timeout (5s a
// round of the cap).
func TestHTTPConnectionCapHeld(t *testing.T) {
	const max, held = 4, 3 * 4
	shapes := []struct {
		name string
		hold func(t *testing.T, addr string) net.Conn
	}{
		{"keep-alive after one request", func(t *testing.T, addr string) net.Conn {
			c, _, r := keepAlive(t, addr, "/healthz", 10*time.Second)
			if r == nil || r.StatusCode != http.StatusOK {
				t.Fatalf("the held connection's request: %v", r)
			}
			return c
		}},
		{"nothing sent", func(t *testing.T, addr string) net.Conn {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}},
	}
	for _, tt := range shapes {
		t.Run(tt.name, func(t *testing.T) {
			s := startSidecar(t, "--config", "../../config/", "--http-max-conns", fmt.Sprint(max))
			var conns []net.Conn
			for range held {
				conns = append(conns, tt.hold(t, s.httpAddr))
			}
			client := &http.Client{Timeout: 10 * time.Second}
			for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
				r, err := client.Get("http://" + s.httpAddr + path)
				if err != nil {
					t.Fatalf("GET %s with the cap held: %v", path, err)
				}
				r.Body.Close()
				if r.StatusCode != http.StatusOK {
					t.Errorf("GET %s with the cap held: %s", path, r.Status)
				}
			}
			// The sidecar holds the cap: it closed the oldest held
			// connections, all but max-1 of them beside the probes'.
			for i, c := range conns[:held-max+1] {
				if !closedWithin(c, 10*time.Second) {
					t.Errorf("held connection %d of %d still open, want the oldest %d closed", i, held, held-max+1)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("gRPC health check with the HTTP listener full: %v", err)
			}
		})
	}
}

// closedWithin reports whether the peer of c closes it within wait: a
// read ends in EOF or a reset, not a timeout. Bytes read are skipped.
func closedWithin(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// closedOf returns how many of conns their peer closes, waiting up to
// wait for want of them.
func closedOf(conns []net.Conn, want int, wait time.Duration) int {
	closed := make(chan bool, len(conns))
	for _, c := range conns {
		go func() { closed <- closedWithin(c, wait) }()
	}
	n := 0
	for range conns {
		if <-closed {
			if n++; n == want {
				break
			}
		}
	}
	return n
}

// TestHTTPIdleTimeout opens more idle keep-alive connections than
// --http-max-conns, one after another: the sidecar closes each, after
// --idle-timeout or to make room for the next, and serves a new health
// probe.
func TestHTTPIdleTimeout(t *testing.T) {
	const max = 8
	s := startSidecar(t, "--config", "../../config/", "--http-max-conns", fmt.Sprint(max), "--idle-timeout", "200ms")
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	conns := make([]conn, max+4)
	for i := range conns {
		c := &conns[i]
		var r *http.Response
		if c.c, c.br, r = keepAlive(t, s.httpAddr, "/healthz", 10*time.Second); r == nil || r.StatusCode != http.StatusOK {
			t.Fatalf("connection %d (cap %d): %v, want 200 within 10s", i, max, r)
		}
	}
	// Every connection is now idle: the sidecar must close it.
	for i, c := range conns {
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.br.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("idle connection %d: read %d bytes, %v; want EOF within 5s", i, n, err)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	r, err := client.Get("http://" + s.httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("new health probe: %s", r.Status)
	}
}

// TestGRPCConnectionCapHeld fills --grpc-max-conns with connections
// that hold on: ones that send nothing, and ones that hold a health
// Watch. A new client's call is still answered. Before the listener
// reclaimed connections, it waited until one of them closed: for
// --grpc-request-timeout, and for the Watch streams
// --grpc-max-connection-age (30m).
func TestGRPCConnectionCapHeld(t *testing.T) {
	const max = 4
	t.Run("nothing sent", func(t *testing.T) {
		s := startSidecar(t, "--config", "../../config/", "--grpc-max-conns", fmt.Sprint(max), "--grpc-request-timeout", "1m")
		var conns []net.Conn
		for range 3 * max {
			c, err := net.DialTimeout("tcp", s.grpcAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0)); err != nil {
			t.Fatalf("a new client with the cap held: %v", err)
		}
		// The oldest were closed: all but max-1 beside the new client's.
		for i, c := range conns[:len(conns)-max+1] {
			if !closedWithin(c, 10*time.Second) {
				t.Errorf("held connection %d of %d still open, want the oldest %d closed", i, len(conns), len(conns)-max+1)
			}
		}
		// Each closed connection is counted where an operator sees the
		// cap is held.
		if got, want := metricValue(t, s, `ratelimit_sidecar_connections_reclaimed_total{listener="grpc"}`), float64(len(conns)-max+1); got != want {
			t.Errorf("connections_reclaimed_total{listener=\"grpc\"} = %v, want %v", got, want)
		}
		if got := metricValue(t, s, `ratelimit_sidecar_connections_open{listener="grpc"}`); got < 1 || got > max {
			t.Errorf("connections_open{listener=\"grpc\"} = %v, want 1 to %d", got, max)
		}
	})

	t.Run("health Watch", func(t *testing.T) {
		s := startSidecar(t, "--config", "../../config/", "--grpc-max-conns", fmt.Sprint(max))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := range max {
			conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if h, err := w.Recv(); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("Watch %d: %v, %v; want SERVING", i, h, err)
			}
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		if _, err := s.rls.ShouldRateLimit(rctx, userRequest("alice", 0)); err != nil {
			t.Fatalf("a new client with the cap held by Watch streams: %v", err)
		}
	})
}

// TestGRPCIdle: with a short --idle-timeout the sidecar closes
// connections that start no call (GOAWAY, then EOF), and a gRPC client
// still gets answers.
func TestGRPCIdle(t *testing.T) {
	const max = 4
	t.Run("idle", func(t *testing.T) {
		s := startSidecar(t, "--config", "../../config/", "--grpc-max-conns", fmt.Sprint(max), "--idle-timeout", "200ms")
		var conns []*rawH2
		for range max {
			conns = append(conns, dialH2(t, s.grpcAddr))
		}
		for i, c := range conns {
			if !c.wait(5*time.Second, func() bool { return c.goaway && c.readErr != nil }) {
				c.mu.Lock()
				t.Errorf("idle connection %d: GOAWAY %v, read error %v; want both within 5s", i, c.goaway, c.readErr)
				c.mu.Unlock()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0)); err != nil {
			t.Errorf("a gRPC client after the idle connections: %v", err)
		}
	})
}

// TestGRPCConnectionLifetime: a connection that never sends the HTTP/2
// preface is closed after --grpc-request-timeout, and one that lives past
// --grpc-max-connection-age gets a GOAWAY.
func TestGRPCConnectionLifetime(t *testing.T) {
	s := startSidecar(t, "--config", "../../config/", "--grpc-request-timeout", "200ms", "--grpc-max-connection-age", "200ms")
	silent, err := net.DialTimeout("tcp", s.grpcAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(silent); err != nil {
		t.Errorf("a connection without the preface: %v; want it closed within 5s", err)
	}

	c := dialH2(t, s.grpcAddr)
	if !c.wait(5*time.Second, func() bool { return c.goaway }) {
		t.Errorf("no GOAWAY within 5s on a connection past its age")
	}
}

// TestMessageAndHeaderSize: an RLS request over 1 MiB is refused with
// RESOURCE_EXHAUSTED at its prefix, before it is read (although the
// server takes RLQS reports up to 16 MiB; internal/bounds' tests show it
// is not read), one over 16 MiB too, and HTTP headers over 16 KiB (and
// net/http's 4 KiB of slack) with 431.
func TestMessageAndHeaderSize(t *testing.T) {
	s := startSidecar(t, "--config", "../../config/")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.rls.ShouldRateLimit(ctx, userRequest(strings.Repeat("x", bounds.MaxBytes), 0))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request over 1 MiB: %v, want RESOURCE_EXHAUSTED", err)
	}
	_, err = s.rls.ShouldRateLimit(ctx, userRequest(strings.Repeat("x", bounds.RLQSMaxBytes), 0), grpc.MaxCallSendMsgSize(32<<20))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request over 16 MiB: %v, want RESOURCE_EXHAUSTED", err)
	}

	req, err := http.NewRequest(http.MethodGet, "http://"+s.httpAddr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("x", 24<<10))
	r, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("24 KiB of headers: %s, want 431", r.Status)
	}
}

// TestGRPCHeaderListSize: a call's headers are bounded as an HTTP
// request's are. Before, grpc-go's default let each of a connection's 100
// streams hold 16 MiB of headers while they were decoded: a few
// connections could hold more than the pod's memory.
func TestGRPCHeaderListSize(t *testing.T) {
	// A request timeout that ends no stream during the test.
	s := startSidecar(t, "--config", "../../config/", "--grpc-request-timeout", "1m")
	// A client that ignores the SETTINGS that say so: its stream ends at
	// once. Before, it stayed open, waiting for its message, with its
	// headers held.
	c := dialH2(t, s.grpcAddr)
	ids, err := c.send("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 1,
		hpack.HeaderField{Name: "x-big", Value: strings.Repeat("x", 4*grpcMaxHeaderListBytes)})
	// The server may reset the connection before the last frame is
	// written: then the write fails, which is the refusal too.
	if err == nil && !c.wait(5*time.Second, func() bool { return c.endedAll(ids) || c.readErr != nil }) {
		t.Errorf("a stream with %d KiB of headers is still open after 5s, want it refused", 4*grpcMaxHeaderListBytes>>10)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// What Envoy sends (a few hundred bytes, a trace context, a few
	// custom headers) passes with room to spare.
	fits := metadata.AppendToOutgoingContext(ctx, "x-fits", strings.Repeat("x", grpcMaxHeaderListBytes/2))
	if _, err := s.rls.ShouldRateLimit(fits, userRequest("alice", 0)); err != nil {
		t.Errorf("a call with %d KiB of headers: %v, want it answered", grpcMaxHeaderListBytes>>11, err)
	}
}

// TestShutdownEndsWatch: a health Watch lasts as long as its client
// likes, so shutdown ends it when it stops gRPC, instead of waiting
// --shutdown-timeout for it.
func TestShutdownEndsWatch(t *testing.T) {
	s := startSidecar(t, "--config", "../../config/")
	w, err := s.health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := w.Recv(); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch update: %v, %v; want SERVING", h, err)
	}
	start := time.Now()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown with a Watch open took %v, want under 5s (--shutdown-timeout is 10s)", d.Round(time.Millisecond))
	}
	// NOT_SERVING, then the end.
	for i := 0; ; i++ {
		if _, err := w.Recv(); err != nil {
			break
		}
		if i == 2 {
			t.Fatal("the Watch goes on after shutdown")
		}
	}
}

// TestRequestRefusedAtPrefix: the sidecar's gRPC connections go through
// internal/bounds, so an RLS request announcing more than 1 MiB is
// refused at its prefix, with RESOURCE_EXHAUSTED, though its client has
// sent a frame of it and stopped; it is counted. Before, grpc-go granted
// the window for the whole message and waited for it until the call's
// deadline (DEADLINE_EXCEEDED after --grpc-request-timeout).
func TestRequestRefusedAtPrefix(t *testing.T) {
	s := startSidecar(t, "--config", "../../config/", "--grpc-request-timeout", "1m")
	c := dialH2(t, s.grpcAddr)
	id := c.open(t, rlsMethod, 1)[0]
	frame := make([]byte, 16<<10)
	binary.BigEndian.PutUint32(frame[1:], 4<<20)
	c.wmu.Lock()
	err := c.fr.WriteData(id, false, frame)
	c.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	c.wait(10*time.Second, func() bool {
		got = c.ended[id]
		return got != ""
	})
	if got != "8" {
		t.Fatalf("an RLS request announcing 4 MiB: stream ended %q, want grpc-status 8 (RESOURCE_EXHAUSTED)", got)
	}
	if v := metricValue(t, s, "ratelimit_sidecar_grpc_messages_refused_total"); v != 1 {
		t.Errorf("grpc_messages_refused_total = %v, want 1", v)
	}
}
