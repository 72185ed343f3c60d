package bounds

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echo serves l: it echoes every line on every connection it accepts,
// and sends each accepted connection's remote address on accepted.
type echo struct {
	l        *Listener
	accepted chan string
	done     chan struct{}

	mu    sync.Mutex
	conns map[string]*capConn // by remote address
}

func startEcho(t *testing.T, max int) *echo {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{l: NewListener(nl, max), accepted: make(chan string, 64), done: make(chan struct{}), conns: map[string]*capConn{}}
	go func() {
		defer close(e.done)
		for {
			c, err := e.l.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c.RemoteAddr().String()] = c.(*capConn)
			e.mu.Unlock()
			e.accepted <- c.RemoteAddr().String()
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		e.l.Close()
		<-e.done
	})
	return e
}

// dial connects to e from the loopback address from ("" for any) and
// waits until e has accepted the connection.
func (e *echo) dial(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", e.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for {
		select {
		case a := <-e.accepted:
			if a == c.LocalAddr().String() {
				return c
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("connection from %s not accepted within 10s", c.LocalAddr())
		}
	}
}

// conn returns the server's side of c.
func (e *echo) conn(t *testing.T, c net.Conn) *capConn {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	sc := e.conns[c.LocalAddr().String()]
	if sc == nil {
		t.Fatalf("no accepted connection from %s", c.LocalAddr())
	}
	return sc
}

// worked sends a line on c and has the server say c worked.
func (e *echo) worked(t *testing.T, c net.Conn) {
	t.Helper()
	if err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	e.conn(t, c).Worked()
}

// roundTrip sends a line on c and reads it back within 10s.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "hi\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "hi\n" {
		return errors.New("echoed " + line)
	}
	return nil
}

// closed reports whether the server has closed c: a read returns EOF or
// a reset within 10s.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestFullListenerAcceptsNewClient: connections that hold the cap and
// send nothing do not keep a new client out; it is accepted at once and
// served, and the listener never holds more than its cap.
func TestFullListenerAcceptsNewClient(t *testing.T) {
	const max, held = 4, 3 * 4
	e := startEcho(t, max)
	var idle []net.Conn
	for range held {
		idle = append(idle, e.dial(t, ""))
	}
	if n := e.l.Open(); n != max {
		t.Errorf("%d connections open after %d idle ones, want the cap, %d", n, held, max)
	}
	c := e.dial(t, "")
	if err := roundTrip(c); err != nil {
		t.Fatalf("a new client with the cap held by idle connections: %v", err)
	}
	if n, r := e.l.Open(), e.l.Reclaimed(); n != max || r != held+1-max {
		t.Errorf("open %d, reclaimed %d; want %d and %d", n, r, max, held+1-max)
	}
	// The oldest idle connections made room, in the order they came.
	for i, o := range idle[:held+1-max] {
		if !closed(o) {
			t.Errorf("idle connection %d still open", i)
		}
	}
}

// TestLeastRecentSenderLosesFirst: with the listener full, the
// connection closed is the one that has sent nothing for longest, not
// the oldest.
func TestLeastRecentSenderLosesFirst(t *testing.T) {
	e := startEcho(t, 2)
	busy := e.dial(t, "")
	quiet := e.dial(t, "")
	if err := roundTrip(quiet); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(busy); err != nil {
		t.Fatal(err)
	}
	e.dial(t, "")
	if !closed(quiet) {
		t.Error("the connection quiet for longest is still open")
	}
	if err := roundTrip(busy); err != nil {
		t.Errorf("the connection that sent last: %v", err)
	}
}

// TestBusiestPeerLosesFirst: a peer that opens many connections closes
// its own to make room, even when another peer's has been quiet for
// longer.
func TestBusiestPeerLosesFirst(t *testing.T) {
	const max = 4
	e := startEcho(t, max)
	other := e.dial(t, "127.0.0.1")
	if err := roundTrip(other); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * max {
		c := e.dial(t, "127.0.0.2")
		if err := roundTrip(c); err != nil {
			t.Fatalf("flooding connection %d: %v", i, err)
		}
	}
	if err := roundTrip(other); err != nil {
		t.Errorf("the other peer's connection, quiet for longest: %v", err)
	}
	if r := e.l.Reclaimed(); r != 3*max+1-max {
		t.Errorf("reclaimed %d, want %d", r, 3*max+1-max)
	}
}

func TestPeerOf(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"127.0.0.1:80", "127.0.0.1/32"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1/32"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			a, err := net.ResolveTCPAddr("tcp", tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if got := peerOf(a).String(); got != tt.want {
				t.Errorf("peerOf(%s) = %s, want %s", tt.give, got, tt.want)
			}
		})
	}
}

// TestWorkingConnectionsKept: a connection that is working is never
// closed to make room, even when its peer holds the most connections
// and it is the quietest of them; idle ones still make room, and when
// every other is working the new connection is closed instead. Issue 37:
// an Envoy of two workers was the peer holding the most against idle
// connections of one address each, and lost 1.6 to 8.3% of its calls to
// the reclaims.
func TestWorkingConnectionsKept(t *testing.T) {
	const max = 4
	e := startEcho(t, max)
	e.l.Working = time.Hour
	// Envoy's two workers, one address; both start calls.
	var workers []net.Conn
	for range 2 {
		w := e.dial(t, "127.0.0.1")
		workers = append(workers, w)
		e.worked(t, w)
	}
	// Idle connections from addresses of their own, then a flood of
	// new ones: each is the peer of one connection.
	for i := range 3 * max {
		c := e.dial(t, fmt.Sprintf("127.0.0.%d", 2+i))
		if err := roundTrip(c); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	for i, w := range workers {
		if err := roundTrip(w); err != nil {
			t.Errorf("Envoy's worker %d, working, lost its connection: %v", i, err)
		}
	}
	if r := e.l.Reclaimed(); r != 3*max+2-max {
		t.Errorf("reclaimed %d, want %d", r, 3*max+2-max)
	}

	// Every connection working: a new one is closed, the others kept.
	all := workers
	for i := range max - len(workers) {
		c := e.dial(t, fmt.Sprintf("127.0.1.%d", 1+i))
		e.worked(t, c)
		all = append(all, c)
	}
	late := e.dial(t, "127.0.2.1")
	if !closed(late) {
		t.Error("a new connection with every other working is open, past the cap")
	}
	if got := e.l.Refused(); got != 1 {
		t.Errorf("Refused() = %d, want 1", got)
	}
	for i, c := range all {
		if err := roundTrip(c); err != nil {
			t.Errorf("working connection %d: %v", i, err)
		}
	}
}

// TestBusyConnectionKept: a connection with a request in flight is not
// closed to make room, and is again once its request ends.
func TestBusyConnectionKept(t *testing.T) {
	e := startEcho(t, 1)
	c := e.dial(t, "")
	b := e.conn(t, c)
	b.Busy(true)
	late := e.dial(t, "")
	if !closed(late) {
		t.Error("a new connection beside a busy one is open, past the cap")
	}
	if err := roundTrip(c); err != nil {
		t.Errorf("the busy connection: %v", err)
	}
	b.Busy(false)
	e.dial(t, "")
	if !closed(c) {
		t.Error("the connection, idle again, was not closed to make room")
	}
}
