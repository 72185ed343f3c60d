package bounds

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	checkMethod   = "/grpc.health.v1.Health/Check"
	reflectMethod = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
)

// serve starts a gRPC server with health and reflection on loopback,
// its messages bounded by m as cmd's are, and returns its address.
func serve(t *testing.T, m *Messages) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(
		grpc.Creds(m.Creds(insecure.NewCredentials())),
		grpc.MaxRecvMsgSize(RLQSMaxBytes),
		grpc.StaticStreamWindowSize(Window),
		grpc.StaticConnWindowSize(1<<20),
	)
	healthpb.RegisterHealthServer(g, health.NewServer())
	reflection.Register(g)
	g.RegisterService(&holdDesc, struct{}{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Serve(l) //nolint:errcheck // ends at Stop
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return l.Addr().String()
}

func testMessages() *Messages {
	return &Messages{
		Default:    MaxBytes,
		Methods:    map[string]int{reflectMethod: RLQSMaxBytes},
		ConnBytes:  ConnBytes,
		TotalBytes: TotalBytes,
		Timeout:    time.Minute,
	}
}

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

var resourceExhausted = strconv.Itoa(int(codes.ResourceExhausted))

// TestOverMethodBoundRefusedBeforeRead: a message longer than its
// method's bound is refused at its prefix, with RESOURCE_EXHAUSTED,
// before the server lets any more of it in. Issue 37: 20 reflection
// streams each sent 15 MiB of a 16 MiB message and held 310 MB for the
// connection's life, and RLS requests were refused only once grpc-go had
// read them whole. Here 8 health Check calls announce 4 MiB (over the
// default 1 MiB) and send what the server lets them: before the bound,
// 32 MiB reached the server and stayed there.
func TestOverMethodBoundRefusedBeforeRead(t *testing.T) {
	m := testMessages()
	c := dialH2(t, serve(t, m))
	before := heapInUse()
	var sent int
	var ids []uint32
	for range 8 {
		id := c.open(checkMethod)
		ids = append(ids, id)
		sent += c.message(id, 4<<20, 4<<20)
	}
	for _, id := range ids {
		if got := c.status(id, 10*time.Second); got != resourceExhausted {
			t.Errorf("stream %d: ended %q, want grpc-status %s (RESOURCE_EXHAUSTED)", id, got, resourceExhausted)
		}
	}
	grew := int64(heapInUse()) - int64(before)
	t.Logf("sent %d bytes, heap grew %d", sent, grew)
	// What a client can send before the refusal reaches it is one
	// window a stream.
	if sent > 8*Window {
		t.Errorf("the streams sent %d bytes, want at most a window each (%d)", sent, 8*Window)
	}
	if grew > 4<<20 {
		t.Errorf("heap grew %d bytes, want under 4 MiB", grew)
	}
	if got := m.Refused(); got != 8 {
		t.Errorf("Refused() = %d, want 8", got)
	}

	// A method with a larger bound takes a message over the default.
	id := c.open(reflectMethod)
	if n := c.message(id, 2<<20, 2<<20); n != 2<<20 {
		t.Errorf("a reflection message of 2 MiB under a bound of 16 MiB: %d bytes sent, want all", n)
	}
}

// TestBytesInFlightBounded: messages longer than a window are counted
// while they arrive, per connection and for the process; one past
// either bound is refused, and what they counted is given back when
// they end. Before these bounds, each stream could hold its message's
// bytes until its call ended.
func TestBytesInFlightBounded(t *testing.T) {
	m := testMessages()
	m.ConnBytes = 3 << 20
	m.TotalBytes = 5 << 20
	addr := serve(t, m)
	// Three streams of a connection announce 1 MiB each and send half:
	// the fourth is past ConnBytes.
	a := dialH2(t, addr)
	var held []uint32
	for range 3 {
		id := a.open(reflectMethod)
		held = append(held, id)
		a.message(id, 1<<20, 512<<10)
	}
	over := a.open(reflectMethod)
	a.message(over, 1<<20, 512<<10)
	if got := a.status(over, 10*time.Second); got != resourceExhausted {
		t.Errorf("a fourth MiB on a connection bounded at 3: %q, want %s", got, resourceExhausted)
	}
	for _, id := range held {
		if got := a.status(id, 0); got != "" {
			t.Errorf("stream %d within the bounds ended %q", id, got)
		}
	}
	// A second connection has room for 2 MiB of the process's 5.
	b := dialH2(t, addr)
	for i := range 3 {
		id := b.open(reflectMethod)
		b.message(id, 1<<20, 512<<10)
		got := b.status(id, 0)
		if i == 2 {
			got = b.status(id, 10*time.Second)
			if got != resourceExhausted {
				t.Errorf("a sixth MiB in a process bounded at 5: %q, want %s", got, resourceExhausted)
			}
		} else if got != "" {
			t.Errorf("stream %d within the bounds ended %q", id, got)
		}
	}
	if got := m.Held(); got != 5<<20 {
		t.Errorf("Held() = %d, want %d", got, 5<<20)
	}
	// Closing a connection gives back what it held.
	a.conn.Close()
	if !waitFor(10*time.Second, func() bool { return m.Held() == 2<<20 }) {
		t.Errorf("Held() = %d after a connection closed, want %d", m.Held(), 2<<20)
	}
}

// waitFor polls cond until it holds, for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(d)
	for !cond() {
		select {
		case <-tick.C:
		case <-timeout:
			return false
		}
	}
	return true
}

// TestStalledMessageEndsConnection: a connection whose message stops
// arriving mid-way is closed after Timeout. Issue 37 saw 4 such
// reflection streams still held after 73 s, past the idle timeout.
func TestStalledMessageEndsConnection(t *testing.T) {
	m := testMessages()
	m.Timeout = 100 * time.Millisecond
	c := dialH2(t, serve(t, m))
	id := c.open(reflectMethod)
	c.message(id, 1000, 500)
	if !c.closed(10 * time.Second) {
		t.Fatalf("a connection with a message stalled for its Timeout is still open")
	}
	if got := m.Stalled(); got != 1 {
		t.Errorf("Stalled() = %d, want 1", got)
	}
	if got := m.Held(); got != 0 {
		t.Errorf("Held() = %d after the connection closed, want 0", got)
	}
}

// TestRealClientThroughBounds: a gRPC client's calls, small and large,
// pass the bounds untouched, and one over its method's bound gets
// RESOURCE_EXHAUSTED.
func TestRealClientThroughBounds(t *testing.T) {
	m := testMessages()
	addr := serve(t, m)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []int{0, 10, Window, MaxBytes - 16} {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: string(make([]byte, n))})
		if status.Code(err) != codes.NotFound && n > 0 || n == 0 && err != nil {
			t.Errorf("Check with a %d-byte name: %v", n, err)
		}
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: string(make([]byte, MaxBytes))})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Check over 1 MiB: %v, want RESOURCE_EXHAUSTED", err)
	}
	if m.Held() != 0 {
		t.Errorf("Held() = %d after the calls, want 0", m.Held())
	}
}

// TestBytesInFlightShared: a client that holds all of TotalBytes (here
// with messages it announces and never sends) does not keep another
// connection's message out: within its share of TotalBytes, a 1/k of it
// for k connections, the other is admitted past TotalBytes.
func TestBytesInFlightShared(t *testing.T) {
	m := testMessages()
	m.ConnBytes = 3 << 20
	m.TotalBytes = 3 << 20
	addr := serve(t, m)
	a := dialH2(t, addr)
	for range 3 {
		a.message(a.open(reflectMethod), 1<<20, 0)
	}
	b := dialH2(t, addr)
	id := b.open(reflectMethod)
	if n := b.message(id, 1<<20, 512<<10); n != 512<<10 {
		t.Errorf("a second connection's message of 1 MiB, within its share of 1.5: %d bytes sent, stream ended %q", n, b.status(id, 0))
	}
	// Past its share, it is refused.
	over := b.open(reflectMethod)
	b.message(over, 1<<20, 0)
	if got := b.status(over, 10*time.Second); got != resourceExhausted {
		t.Errorf("a second MiB past the share: %q, want %s", got, resourceExhausted)
	}
}

// holdMethod is a bidirectional stream whose handler reads one message
// and then nothing until the call ends, as a handler busy with the
// stream's previous message does.
const holdMethod = "/bounds.test.Hold/Hold"

var holdDesc = grpc.ServiceDesc{
	ServiceName: "bounds.test.Hold",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Hold",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			<-ss.Context().Done()
			return nil
		},
	}},
}

// TestBlockedMessageTimed: a message whose window is spent waits on the
// server's handler, and is timed by BlockedTimeout instead of Timeout; a
// handler that does not read it for that long is not serving the
// stream, and the connection is closed.
func TestBlockedMessageTimed(t *testing.T) {
	m := testMessages()
	m.Timeout = time.Hour
	m.BlockedTimeout = 100 * time.Millisecond
	c := dialH2(t, serve(t, m))
	id := c.open(holdMethod)
	c.message(id, 0, 0)
	if n := c.message(id, 1<<20, 1<<20); n >= 1<<20 {
		t.Fatalf("sent all %d bytes of a message the handler does not read", n)
	}
	if !c.closed(10 * time.Second) {
		t.Fatalf("a connection with a message blocked for its BlockedTimeout is still open")
	}
	if got := m.Stalled(); got != 1 {
		t.Errorf("Stalled() = %d, want 1", got)
	}
}
