package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// A port spoken to in the wrong protocol fails as an outage would. Redis
// takes a TLS greeting on its plain-text port for the start of an inline
// command and waits for a line end, which the greeting may well lack, so
// the handshake times out; a TLS port closes a connection that speaks
// plain text, so the first reply is a closed connection. After such a
// failure the watch asks the port itself, on a connection of its own, in
// the protocol the store does not speak to it: a PING to a port the
// store speaks TLS to, a TLS greeting to one it speaks plain text to. An
// answer makes the failure a TLS refusal. At most one question per node
// or sentinel is under way, and at most one a second.

const (
	// sniffEvery is the least time between two questions to one source.
	sniffEvery = time.Second
	// sniffTimeout bounds a question.
	sniffTimeout = time.Second
)

// The messages of the TLS refusals that sniffing finds.
const (
	msgPlainPort = "the server answered PING in plain text: this port does not speak TLS"
	msgTLSPort   = "the server speaks TLS on this port: use a rediss:// URL or turn TLS on"
)

// mismatched reports whether err, from a client that speaks TLS or
// not, is how a port spoken to in the wrong protocol fails.
func mismatched(err error, useTLS bool) bool {
	var ne net.Error
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
	if !useTLS {
		return closed
	}
	return closed || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// sniffer runs the questions of a watch, in goroutines that close
// stops. It is safe for concurrent use.
type sniffer struct {
	ctx    context.Context // ends the questions under way
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	asking    map[string]bool      // by source: a question is under way
	lastAsked map[string]time.Time // by source: when the last one started
}

func newSniffer() *sniffer {
	ctx, cancel := context.WithCancel(context.Background())
	return &sniffer{ctx: ctx, cancel: cancel, asking: map[string]bool{}, lastAsked: map[string]time.Time{}}
}

// sniff asks addr, for source key of role, in the background, whether it
// speaks the protocol that a client with or without TLS does not, and
// records a TLS refusal in w if it does. It does nothing if a question
// to key is under way or started within sniffEvery, or after close.
func (w *watch) sniff(key, role, addr string, useTLS bool) {
	if addr == "" {
		return
	}
	sn := w.sniffs
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if sn.closed || sn.asking[key] || time.Since(sn.lastAsked[key]) < sniffEvery {
		return
	}
	sn.asking[key], sn.lastAsked[key] = true, time.Now()
	sn.wg.Go(func() {
		defer func() {
			sn.mu.Lock()
			delete(sn.asking, key)
			sn.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(sn.ctx, sniffTimeout)
		defer cancel()
		msg := ""
		switch {
		case useTLS && speaksPlain(ctx, addr):
			msg = msgPlainPort
		case !useTLS && speaksTLS(ctx, addr):
			msg = msgTLSPort
		}
		if msg != "" {
			w.record(key, &ConfigError{Kind: KindTLS, Role: role, Addr: addr, Msg: msg})
		}
	})
}

// close ends the questions under way, waits for them, and starts no more.
func (sn *sniffer) close() {
	sn.mu.Lock()
	sn.closed = true
	sn.mu.Unlock()
	sn.cancel()
	sn.wg.Wait()
}

// speaksPlain reports whether addr answers a PING in RESP, as a Redis
// port without TLS does, within ctx.
func speaksPlain(ctx context.Context, addr string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false
	}
	// +PONG, or an error such as -NOAUTH.
	return b[0] == '+' || b[0] == '-'
}

// speaksTLS reports whether addr answers a TLS greeting in TLS, within
// ctx: with a handshake, or with an alert, such as a server's that wants
// a client certificate.
func speaksTLS(ctx context.Context, addr string) bool {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	// Nothing is sent on this connection, and whom it reaches does not
	// matter: only whether it speaks TLS at all.
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // see above
	err = tc.HandshakeContext(ctx)
	var oe *net.OpError
	return err == nil || errors.As(err, &oe) && oe.Op == "remote error"
}
