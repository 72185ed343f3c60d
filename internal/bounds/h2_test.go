package bounds

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2 is a test's HTTP/2 client driven frame by frame, to send what a gRPC
// client never would: a stream's HEADERS and then nothing, or most of a
// message and then nothing. It keeps to the server's flow control, as a
// hostile client must to be served at all. A goroutine reads the
// server's frames and records how each stream ended.
type h2 struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer

	wmu  sync.Mutex // guards writes, hbuf, enc and next
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change below
	window  map[uint32]int64
	conned  int64 // the connection's send window
	initial int64
	ended   map[uint32]string // stream → grpc-status, "refused" or "rst"
	refused int               // streams reset with REFUSED_STREAM
	goaway  bool
	pings   int    // PING acks
	streams uint32 // SETTINGS_MAX_CONCURRENT_STREAMS, once the server sent it
	readErr error
	done    chan struct{}
}

func dialH2(t testing.TB, addr string) *h2 {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2{t: t, conn: conn, fr: http2.NewFramer(conn, conn), next: 1, changed: make(chan struct{}),
		window: map[uint32]int64{}, conned: 65_535, initial: 65_535, ended: map[uint32]string{}, done: make(chan struct{})}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go c.read()
	t.Cleanup(func() {
		conn.Close()
		<-c.done
	})
	return c
}

func (c *h2) update(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait waits up to d for cond, run with c.mu held.
func (c *h2) wait(d time.Duration, cond func() bool) bool {
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

func (c *h2) read() {
	defer close(c.done)
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
				if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
					c.streams = v
				}
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					for id := range c.window {
						c.window[id] += int64(v) - c.initial
					}
					c.initial = int64(v)
				}
			})
			c.wmu.Lock()
			c.fr.WriteSettingsAck() //nolint:errcheck // a failed write shows as a read error
			c.wmu.Unlock()
		case *http2.PingFrame:
			if f.IsAck() {
				c.update(func() { c.pings++ })
			} else {
				c.wmu.Lock()
				c.fr.WritePing(true, f.Data) //nolint:errcheck // as above
				c.wmu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			c.update(func() {
				if f.StreamID == 0 {
					c.conned += int64(f.Increment)
				} else {
					c.window[f.StreamID] += int64(f.Increment)
				}
			})
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
					c.ended[f.StreamID] = "rst"
				}
			})
		case *http2.GoAwayFrame:
			c.update(func() { c.goaway = true })
		}
	}
}

// open starts a call of method and returns its stream.
func (c *h2) open(method string) uint32 {
	return c.opens(method, 1)[0]
}

// opens sends HEADERS for n new streams calling method, with the extra
// header fields if any, without END_STREAM and without a message, and
// returns their IDs.
func (c *h2) opens(method string, n int, extra ...hpack.HeaderField) []uint32 {
	ids, err := c.send(method, n, extra...)
	if err != nil {
		c.t.Fatal(err)
	}
	return ids
}

// send is opens, returning the first write that fails: the server may
// reset a connection while its headers are still being sent. A header
// block larger than a frame goes on in CONTINUATION frames, whatever the
// server's SETTINGS say.
func (c *h2) send(method string, n int, extra ...hpack.HeaderField) ([]uint32, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ids := make([]uint32, 0, n)
	for range n {
		c.hbuf.Reset()
		for _, hf := range append([]hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: method},
			{Name: ":authority", Value: "bounds"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		}, extra...) {
			c.enc.WriteField(hf) //nolint:errcheck // writes to a bytes.Buffer
		}
		id := c.next
		c.next += 2
		c.mu.Lock()
		c.window[id] = c.initial
		c.mu.Unlock()
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

// message sends on stream id the prefix of a message of n bytes and then
// its first send bytes, as the windows let them go, waiting up to 10 s
// for window. It returns how many it sent: fewer if the stream ended.
func (c *h2) message(id uint32, n, send int) int {
	var pfx [5]byte
	binary.BigEndian.PutUint32(pfx[1:], uint32(n))
	buf := append(pfx[:], make([]byte, 16<<10-5)...)
	sent := -5
	for sent < send {
		var k int
		ok := c.wait(10*time.Second, func() bool {
			if _, done := c.ended[id]; done || c.readErr != nil {
				return true
			}
			k = int(min(int64(len(buf)), int64(send-sent), c.window[id], c.conned))
			return k > 0
		})
		c.mu.Lock()
		_, done := c.ended[id]
		stop := done || c.readErr != nil || !ok
		if !stop {
			c.window[id] -= int64(k)
			c.conned -= int64(k)
		}
		c.mu.Unlock()
		if stop {
			break
		}
		c.wmu.Lock()
		err := c.fr.WriteData(id, false, buf[:k])
		c.wmu.Unlock()
		if err != nil {
			break
		}
		sent += k
		buf = buf[k:]
		if len(buf) == 0 {
			buf = make([]byte, 16<<10)
		}
	}
	return max(0, sent)
}

// status waits up to d for stream id to end, and returns how.
func (c *h2) status(id uint32, d time.Duration) string {
	var s string
	c.wait(d, func() bool {
		var ok bool
		s, ok = c.ended[id]
		return ok
	})
	return s
}

// closed waits up to d for the server to close the connection.
func (c *h2) closed(d time.Duration) bool {
	return c.wait(d, func() bool { return c.readErr != nil })
}

// endedAll reports whether the server ended every stream in ids.
// requires c.mu held
func (c *h2) endedAll(ids []uint32) bool {
	for _, id := range ids {
		if _, ok := c.ended[id]; !ok {
			return false
		}
	}
	return true
}

// statuses counts how the streams in ids ended.
// requires c.mu held
func (c *h2) statuses(ids []uint32) map[string]int {
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
func (c *h2) sync() {
	c.t.Helper()
	c.mu.Lock()
	want := c.pings + 1
	c.mu.Unlock()
	c.wmu.Lock()
	err := c.fr.WritePing(false, [8]byte{1})
	c.wmu.Unlock()
	if err != nil {
		c.t.Fatal(err)
	}
	if !c.wait(10*time.Second, func() bool { return c.pings >= want }) {
		c.t.Fatal("no PING ack within 10s")
	}
}
