package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/conntest"
)

// TestBoundFlagsReachServers: the bound flags reach the sidecar's
// servers and listeners, and what they refuse is counted where an
// operator sees it. What each bound does is specified in
// internal/bounds.
func TestBoundFlagsReachServers(t *testing.T) {
	args := []string{"--config", "../../config/",
		"--grpc-max-streams", "7", "--grpc-max-conns", "2", "--http-max-conns", "2",
		"--grpc-request-timeout", "1m", "--grpc-max-connection-age", "1h", "--idle-timeout", "2m"}
	c, err := parseFlags(args, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := bounds.Server{GRPCMaxStreams: 7, GRPCMaxConns: 2, HTTPMaxConns: 2, RequestTimeout: time.Minute, MaxConnAge: time.Hour, IdleTimeout: 2 * time.Minute}
	if c.bounds != want {
		t.Errorf("flags parsed to %+v, want %+v", c.bounds, want)
	}
	s := startSidecar(t, sidecarOpts{args: args})

	// The gRPC server's options: its SETTINGS say --grpc-max-streams.
	if got := maxStreams(t, s.grpcAddr); got != 7 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 7 (--grpc-max-streams)", got)
	}
	// The listeners' caps: connections that send nothing, past each
	// cap, are closed to make room, and counted. (Before the requests
	// below: a request refused for its headers keeps its connection
	// working while net/http closes it.)
	for _, l := range []struct{ name, addr string }{{"grpc", s.grpcAddr}, {"http", s.httpAddr}} {
		var held []net.Conn
		for range 4 {
			conn, err := net.DialTimeout("tcp", l.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			held = append(held, conn)
		}
		if n := conntest.ClosedOf(held, 1, 10*time.Second); n < 1 {
			t.Errorf("%s: none of 4 silent connections closed, want room made at --%s-max-conns 2", l.name, l.name)
		}
		series := `ratelimit_sidecar_connections_reclaimed_total{listener="` + l.name + `"}`
		waitFor(t, func() bool { return metricValue(t, s, series) >= 1 })
	}
	// Its messages: an RLS request over 1 MiB is refused at its prefix
	// by the message bounds, which count it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.rls.ShouldRateLimit(ctx, userRequest(strings.Repeat("x", bounds.MaxBytes), 0)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request over 1 MiB: %v, want RESOURCE_EXHAUSTED", err)
	}
	if v := metricValue(t, s, "ratelimit_sidecar_grpc_messages_refused_total"); v != 1 {
		t.Errorf("grpc_messages_refused_total = %v, want 1", v)
	}
	// The HTTP servers' bounds: headers over 16 KiB are refused.
	req, err := http.NewRequest(http.MethodGet, "http://"+s.httpAddr+"/healthz", nil)
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

// maxStreams returns the SETTINGS_MAX_CONCURRENT_STREAMS of the HTTP/2
// server at addr.
func maxStreams(t *testing.T, addr string) uint32 {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(conn, conn)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("the server's first frame is %v, want SETTINGS", f)
	}
	v, _ := sf.Value(http2.SettingMaxConcurrentStreams)
	return v
}
