package bounds

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
)

// tlsServer serves TLS handshakes on loopback through gate, with client
// certificates required when clientAuth; each connection is closed once
// its handshake ends.
type tlsServer struct {
	addr   string
	client *tls.Config
}

func startTLS(t *testing.T, gate *HandshakeGate, clientAuth bool) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "server")
	cfg := ca.ServerConfig(t, pair, clientAuth)
	var client *tls.Config
	if clientAuth {
		cp := ca.Issue(t, "client")
		client = ca.ClientConfig(t, &cp)
	} else {
		client = ca.ClientConfig(t, nil)
	}
	client.ServerName = "localhost"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				gc := gate.Conn(c)
				tc := tls.Server(gc, cfg)
				err := tc.Handshake()
				gc.Done()
				if err == nil {
					tc.Write([]byte{1})
				}
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return &tlsServer{addr: l.Addr().String(), client: client}
}

// handshake makes a full handshake with s and reads the byte the server
// sends after it, within 10s.
func (s *tlsServer) handshake() error {
	c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, s.client)
	if err := tc.Handshake(); err != nil {
		return err
	}
	_, err = tc.Read(make([]byte, 1))
	return err
}

// TestHandshakeGateBounds: clients that handshake over and over, many at
// once, get at most the gate's number of handshakes computing at once,
// and every handshake still succeeds, with and without client
// certificates. Without a gate (one slot per client) 8 clients had up to
// 8 at once.
func TestHandshakeGateBounds(t *testing.T) {
	const clients, each = 8, 10
	for _, clientAuth := range []bool{false, true} {
		gate := NewHandshakeGate(HandshakeOptions{Slots: 1, Wait: time.Minute})
		s := startTLS(t, gate, clientAuth)
		var wg sync.WaitGroup
		errs := make(chan error, clients*each)
		for range clients {
			wg.Go(func() {
				for range each {
					errs <- s.handshake()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("client certificates %v: %v", clientAuth, err)
			}
		}
		if p := gate.Peak(); p != 1 {
			t.Errorf("client certificates %v: %d handshakes computing at once, want 1", clientAuth, p)
		}
	}
}

// stalled is a connection whose reads wait until it is closed: a TLS
// client on it sends its ClientHello and waits for ever.
type stalled struct {
	net.Conn
	closed chan struct{}
}

func (s *stalled) Read([]byte) (int, error) {
	<-s.closed
	return 0, net.ErrClosed
}

// stalledAfterCCS is a connection on which a TLS 1.3 client sends its
// ChangeCipherSpec record and then nothing more: the server has one
// record of the client's second flight, and waits for the rest.
type stalledAfterCCS struct {
	net.Conn
	sent   chan struct{} // closed once the record is sent
	closed chan struct{}
}

func (s *stalledAfterCCS) Write(b []byte) (int, error) {
	ccs := []byte{0x14, 0x03, 0x03, 0x00, 0x01, 0x01}
	if len(b) >= len(ccs) && string(b[:len(ccs)]) == string(ccs) {
		if _, err := s.Conn.Write(ccs); err != nil {
			return 0, err
		}
		close(s.sent)
		<-s.closed
		return 0, net.ErrClosed
	}
	return s.Conn.Write(b)
}

// TestHandshakeGateWaitsForNoClient: clients that send part of a
// ClientHello, a whole one and then nothing, or one record of their
// second flight, hold no slot: a full handshake with the gate's only
// slot still succeeds while they wait.
func TestHandshakeGateWaitsForNoClient(t *testing.T) {
	const n = 4
	gate := NewHandshakeGate(HandshakeOptions{Slots: 1, Wait: time.Minute})
	s := startTLS(t, gate, false)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range n {
		c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A handshake record's header announcing 512 bytes, and 3.
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sc := &stalled{Conn: c, closed: make(chan struct{})}
		defer func() {
			close(sc.closed)
			c.Close()
		}()
		wg.Go(func() { tls.Client(sc, s.client).Handshake() })
	}
	for range n {
		c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sc := &stalledAfterCCS{Conn: c, sent: make(chan struct{}), closed: make(chan struct{})}
		defer func() {
			close(sc.closed)
			c.Close()
		}()
		cfg := s.client.Clone()
		cfg.MinVersion = tls.VersionTLS13
		wg.Go(func() { tls.Client(sc, cfg).Handshake() })
		select {
		case <-sc.sent:
		case <-time.After(10 * time.Second):
			t.Fatal("no ChangeCipherSpec within 10s")
		}
	}
	if err := s.handshake(); err != nil {
		t.Fatalf("a full handshake beside %d stalled ones: %v", 3*n, err)
	}
}

func TestReserve(t *testing.T) {
	// 10 a second (one each 100ms), 3 at once, waiting at most 150ms.
	g := NewHandshakeGate(HandshakeOptions{Rate: 10, Burst: 3, Wait: 150 * time.Millisecond})
	t0 := time.Unix(1000, 0)
	tests := []struct {
		give     time.Time
		wantWait time.Duration
		wantOK   bool
	}{
		{t0, 0, true},
		{t0, 0, true},
		{t0, 0, true},
		{t0, 100 * time.Millisecond, true},
		{t0, 0, false}, // 200ms away
		{t0.Add(50 * time.Millisecond), 150 * time.Millisecond, true},
		{t0.Add(time.Second), 0, true},
	}
	for i, tt := range tests {
		wait, ok := g.reserve(tt.give)
		if wait != tt.wantWait || ok != tt.wantOK {
			t.Errorf("reserve %d at %v: %v, %v; want %v, %v", i, tt.give.Sub(t0), wait, ok, tt.wantWait, tt.wantOK)
		}
	}
}

func TestReserveNoRate(t *testing.T) {
	g := NewHandshakeGate(HandshakeOptions{})
	for i := range 1000 {
		if wait, ok := g.reserve(time.Unix(0, 0)); wait != 0 || !ok {
			t.Fatalf("reserve %d without a rate: %v, %v", i, wait, ok)
		}
	}
}

// TestHandshakeGateRate: past its burst, a gate lets handshakes start
// only at its rate; one that would wait too long for its turn fails at
// once. Without a rate, all 10 succeed.
func TestHandshakeGateRate(t *testing.T) {
	const n, burst = 10, 3
	gate := NewHandshakeGate(HandshakeOptions{Slots: 1, Rate: 1.0 / 3600, Burst: burst, Wait: time.Minute})
	s := startTLS(t, gate, false)
	ok := 0
	for range n {
		if s.handshake() == nil {
			ok++
		}
	}
	if ok != burst {
		t.Errorf("%d of %d handshakes at once succeeded, want the burst, %d", ok, n, burst)
	}
}
