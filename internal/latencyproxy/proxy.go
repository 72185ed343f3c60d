// Package latencyproxy is a TCP proxy that adds a fixed round-trip time,
// for benchmarks and tests of clients of a far-away server.
//
// Each direction of each connection is a delay line: a chunk read from one
// side is written to the other half the added round-trip time after it was
// read. Chunks keep their order and a slow chunk never holds back the
// reading of the next, so pipelined requests and replies overlap as they
// would on a long link: the proxy adds latency, not serialization.
package latencyproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// chunkSize bounds one read, and so one delayed write.
const chunkSize = 32 << 10

// lineChunks bounds the chunks a direction holds in its delay line, so a
// connection buffers at most lineChunks × chunkSize bytes; a reader that
// finds the line full stops reading, as a full socket buffer would.
const lineChunks = 256

// Proxy forwards connections to one address with an added round-trip
// time. Create it with Start and release it with Close.
type Proxy struct {
	// Addr is the "127.0.0.1:port" address the proxy listens on.
	Addr string

	target string
	half   time.Duration // each way's delay
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Start listens on a free loopback port and forwards every connection to
// target, delaying each direction by rtt/2.
func Start(target string, rtt time.Duration) (*Proxy, error) {
	if rtt < 0 {
		return nil, errors.New("latencyproxy: negative round-trip time")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, half: rtt / 2, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// track records c so that Close closes it, and reports false (closing c)
// if the proxy is closed already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(down) {
			return
		}
		p.wg.Go(func() { p.serve(down) })
	}
}

// serve forwards down to the target until either side closes.
func (p *Proxy) serve(down net.Conn) {
	defer p.untrack(down)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	var wg sync.WaitGroup
	wg.Go(func() { delay(up, down, p.half); _ = down.Close() })
	delay(down, up, p.half)
	_ = up.Close()
	wg.Wait()
}

// chunk is data read at a time, due to be written at due.
type chunk struct {
	data []byte
	due  time.Time
}

// delay copies from src to dst, each chunk d after it was read, until
// src ends or dst fails. It closes neither.
func delay(src, dst net.Conn, d time.Duration) {
	line := make(chan chunk, lineChunks) // the delay line: see lineChunks
	var wg sync.WaitGroup
	wg.Go(func() {
		sl := newSleeper()
		defer sl.close()
		failed := false
		for c := range line {
			if failed {
				continue // drain, so the reader is never stuck
			}
			if d := time.Until(c.due); d > 0 {
				sl.sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				failed = true
				_ = src.Close() // stops the reader
			}
		}
	})
	defer wg.Wait()
	defer close(line)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			line <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(d)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}
