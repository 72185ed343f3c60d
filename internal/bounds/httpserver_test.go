package bounds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/conntest"
)

// serveHTTP starts an HTTP server of health probes bounded by s on a
// loopback listener it caps, and returns its address.
func serveHTTP(t *testing.T, s Server) string {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK") })
	}
	hs := s.HTTPServer(mux)
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(s.CapHTTP(nl)) //nolint:errcheck // ends at Close
	}()
	t.Cleanup(func() {
		// Shutdown waits for every connection's goroutine, which Close
		// does not: goleak would see one still closing.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
		<-done
	})
	return nl.Addr().String()
}

// keepAlive opens a connection to addr and makes a keep-alive GET of path
// on it. If the response comes within wait, it reads it and returns the
// connection idle; otherwise it returns the connection with the request
// outstanding and the response nil.
func keepAlive(t *testing.T, addr, path string, wait time.Duration) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: bounds\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	r, err := http.ReadResponse(br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return conn, br, nil
		}
		t.Fatal(err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return conn, br, r
}

// TestHTTPConnectionCapHeld fills HTTPMaxConns, three times over, with
// connections that hold on: keep-alive connections that made one
// request, and connections that send nothing. The probes and a new
// client are still answered, and the oldest held connections are closed
// to make room for them. Before the listener reclaimed connections, the
// probes waited until a held connection closed itself: for IdleTimeout
// (1m) or the header timeout (5s a round of the cap).
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
			s := defaults()
			s.HTTPMaxConns = max
			addr := serveHTTP(t, s)
			var conns []net.Conn
			for range held {
				conns = append(conns, tt.hold(t, addr))
			}
			client := &http.Client{Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for _, path := range []string{"/healthz", "/readyz", "/healthcheck"} {
				r, err := client.Get("http://" + addr + path)
				if err != nil {
					t.Fatalf("GET %s with the cap held: %v", path, err)
				}
				r.Body.Close()
				if r.StatusCode != http.StatusOK {
					t.Errorf("GET %s with the cap held: %s", path, r.Status)
				}
			}
			// The server holds the cap: it closed all but max-1 of the
			// held connections beside the probes'. Which ones is not
			// fixed: a keep-alive connection's quiet starts when the
			// server has written its answer, which may come after the
			// client has opened the next connection.
			if n := conntest.ClosedOf(conns, held-max+1, 10*time.Second); n != held-max+1 {
				t.Errorf("%d of %d held connections closed, want %d", n, held, held-max+1)
			}
		})
	}
}

// TestHTTPIdleTimeout opens more idle keep-alive connections than
// HTTPMaxConns, one after another: the server closes each, after
// IdleTimeout or to make room for the next, and serves a new health
// probe.
func TestHTTPIdleTimeout(t *testing.T) {
	const max = 8
	s := defaults()
	s.HTTPMaxConns, s.IdleTimeout = max, 200*time.Millisecond
	addr := serveHTTP(t, s)
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	conns := make([]conn, max+4)
	for i := range conns {
		c := &conns[i]
		var r *http.Response
		if c.c, c.br, r = keepAlive(t, addr, "/healthz", 10*time.Second); r == nil || r.StatusCode != http.StatusOK {
			t.Fatalf("connection %d (cap %d): %v, want 200 within 10s", i, max, r)
		}
	}
	// Every connection is now idle: the server must close it.
	for i, c := range conns {
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.br.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("idle connection %d: read %d bytes, %v; want EOF within 5s", i, n, err)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	r, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("new health probe: %s", r.Status)
	}
}

// TestHTTPHeaderSize: HTTP headers over 16 KiB (and net/http's 4 KiB of
// slack) are refused with 431.
func TestHTTPHeaderSize(t *testing.T) {
	addr := serveHTTP(t, defaults())
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("x", 24<<10))
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	r, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("24 KiB of headers: %s, want 431", r.Status)
	}
}

// TestServerCheck: each flag out of range is reported by its name.
func TestServerCheck(t *testing.T) {
	tests := []struct {
		name string
		give func(*Server)
		want string
	}{
		{"defaults", func(*Server) {}, ""},
		{"no streams", func(s *Server) { s.GRPCMaxStreams = 0 }, "--grpc-max-streams: want 1 to 4294967295, got 0"},
		{"streams past uint32", func(s *Server) { s.GRPCMaxStreams = 1 << 32 }, "--grpc-max-streams: want 1 to 4294967295, got 4294967296"},
		{"negative grpc conns", func(s *Server) { s.GRPCMaxConns = -1 }, "--grpc-max-conns: want 0 (no cap) or more, got -1"},
		{"no grpc cap", func(s *Server) { s.GRPCMaxConns = 0 }, ""},
		{"negative http conns", func(s *Server) { s.HTTPMaxConns = -1 }, "--http-max-conns: want 0 (no cap) or more, got -1"},
		{"request timeout", func(s *Server) { s.RequestTimeout = time.Nanosecond }, "--grpc-request-timeout: want 10ms or more, got 1ns"},
		{"connection age", func(s *Server) { s.MaxConnAge = time.Nanosecond }, "--grpc-max-connection-age: want 0 (no limit) or 100ms or more, got 1ns"},
		{"no connection age", func(s *Server) { s.MaxConnAge = 0 }, ""},
		{"idle timeout", func(s *Server) { s.IdleTimeout = time.Nanosecond }, "--idle-timeout: want 100ms or more, got 1ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := defaults()
			tt.give(&s)
			err := s.Check()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Check() = %q, want %q", got, tt.want)
			}
		})
	}
}
