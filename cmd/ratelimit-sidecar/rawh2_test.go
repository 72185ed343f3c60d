package main

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	rlsMethod   = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// rawH2 is an HTTP/2 connection to the gRPC port driven frame by frame,
// to send what a gRPC client never would: a stream's HEADERS and then
// nothing. A goroutine reads the server's frames and records how each
// stream ended.
type rawH2 struct {
	conn net.Conn
	fr   *http2.Framer

	wmu    sync.Mutex // guards writes on fr, hbuf, enc and next
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
	next   uint32 // the next stream ID
	closed chan struct{}

	mu         sync.Mutex
	changed    chan struct{}     // closed and replaced on every change below
	refused    int               // streams reset with REFUSED_STREAM
	ended      map[uint32]string // stream → its grpc-status, "refused" or "rst <code>"
	settings   bool              // the server's SETTINGS arrived: it accepted the connection
	goaway     bool
	pingAcks   int
	readErr    error
	maxStreams uint32 // SETTINGS_MAX_CONCURRENT_STREAMS, once the server sent it
}

// dialH2 opens a connection to addr and sends the client preface.
func dialH2(t testing.TB, addr string) *rawH2 {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawH2{conn: conn, fr: http2.NewFramer(conn, conn), next: 1, closed: make(chan struct{}),
		changed: make(chan struct{}), ended: map[uint32]string{}}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go c.read()
	t.Cleanup(c.close)
	return c
}

func (c *rawH2) close() {
	c.conn.Close()
	<-c.closed
}

// read records the server's frames until the connection fails.
func (c *rawH2) read() {
	defer close(c.closed)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.update(func() { c.readErr = err })
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			c.update(func() {
				c.settings = true
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					c.maxStreams = v
				}
			})
			c.wmu.Lock()
			c.fr.WriteSettingsAck() //nolint:errcheck // a failed write shows as a read error
			c.wmu.Unlock()
		case *http2.PingFrame:
			if f.IsAck() {
				c.update(func() { c.pingAcks++ })
			} else {
				c.wmu.Lock()
				c.fr.WritePing(true, f.Data) //nolint:errcheck // as above
				c.wmu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				status := "no grpc-status"
				for _, hf := range f.RegularFields() {
					if hf.Name == "grpc-status" {
						status = hf.Value
					}
				}
				c.update(func() { c.ended[f.StreamID] = status })
			}
		case *http2.RSTStreamFrame:
			c.update(func() {
				if f.ErrCode == http2.ErrCodeRefusedStream {
					c.refused++
					c.ended[f.StreamID] = "refused"
				} else if _, ok := c.ended[f.StreamID]; !ok {
					c.ended[f.StreamID] = "rst " + f.ErrCode.String()
				}
			})
		case *http2.GoAwayFrame:
			c.update(func() { c.goaway = true })
		}
	}
}

func (c *rawH2) update(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait waits up to d for cond, which runs with c.mu held, and reports
// whether it came true.
func (c *rawH2) wait(d time.Duration, cond func() bool) bool {
	timeout := time.After(d)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}

// open sends HEADERS for n new streams calling method, with the extra
// header fields if any, without END_STREAM and without a message, and
// returns their IDs. A header block larger than a frame goes on in
// CONTINUATION frames, whatever the server's SETTINGS say.
func (c *rawH2) open(t testing.TB, method string, n int, extra ...hpack.HeaderField) []uint32 {
	t.Helper()
	ids, err := c.send(method, n, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// send is open, returning the first write that fails: the server may
// reset a connection while its headers are still being sent.
func (c *rawH2) send(method string, n int, extra ...hpack.HeaderField) ([]uint32, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ids := make([]uint32, 0, n)
	for range n {
		c.hbuf.Reset()
		for _, hf := range append([]hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: method},
			{Name: ":authority", Value: "sidecar"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		}, extra...) {
			c.enc.WriteField(hf) //nolint:errcheck // writes to a bytes.Buffer
		}
		id := c.next
		c.next += 2
		const frame = 16 << 10 // the smallest SETTINGS_MAX_FRAME_SIZE
		block := c.hbuf.Bytes()
		first := block[:min(frame, len(block))]
		err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(block) <= frame})
		for rest := block[len(first):]; err == nil && len(rest) > 0; {
			part := rest[:min(frame, len(rest))]
			rest = rest[len(part):]
			err = c.fr.WriteContinuation(id, len(rest) == 0, part)
		}
		if err != nil {
			return ids, fmt.Errorf("HEADERS for stream %d: %w", id, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// endedAll reports whether the server ended every stream in ids; it
// requires c.mu held.
func (c *rawH2) endedAll(ids []uint32) bool {
	for _, id := range ids {
		if _, ok := c.ended[id]; !ok {
			return false
		}
	}
	return true
}

// statuses counts how the streams in ids ended; it requires c.mu held.
func (c *rawH2) statuses(ids []uint32) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		s, ok := c.ended[id]
		if !ok {
			s = "open"
		}
		out[s]++
	}
	return out
}

// sync sends a PING and waits up to 10 s for its ack: the server has then
// read every frame sent before it.
func (c *rawH2) sync(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	want := c.pingAcks + 1
	c.mu.Unlock()
	c.wmu.Lock()
	err := c.fr.WritePing(false, [8]byte{1})
	c.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if !c.wait(10*time.Second, func() bool { return c.pingAcks >= want }) {
		t.Fatal("no PING ack within 10s")
	}
}
