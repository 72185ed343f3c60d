package redistest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Fake is a RESP2 server on loopback that answers each command with what
// its Answer returns, as raw bytes: enough Redis to lead a client to a
// reply of the test's choosing. It answers HELLO with an error, so that
// clients speak RESP2, unless the Answer does.
type Fake struct {
	Addr string

	ln     net.Listener
	answer Answer

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Answer returns a Fake's reply to a command: nil for DefaultAnswer's.
// If hangup is set, the Fake closes the connection once it has written
// the reply.
type Answer func(args []string) (reply []byte, hangup bool)

// NewFake starts a Fake that answers with answer (nil: DefaultAnswer
// for every command). It is closed at the test's cleanup.
func NewFake(t testing.TB, answer Answer) *Fake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{Addr: ln.Addr().String(), ln: ln, answer: answer, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	t.Cleanup(f.Close)
	return f
}

// Close stops the server, closes its connections and waits for them.
func (f *Fake) Close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Fake) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Go(func() { f.serve(c) })
	}
}

func (f *Fake) serve(c net.Conn) {
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply []byte
		hangup := false
		if f.answer != nil {
			reply, hangup = f.answer(args)
		}
		if reply == nil {
			reply = DefaultAnswer(args)
		}
		if _, err := c.Write(reply); err != nil || hangup {
			return
		}
	}
}

// DefaultAnswer is a Fake's answer when its function returns nil: an
// error for HELLO, +OK for everything else.
func DefaultAnswer(args []string) []byte {
	if len(args) > 0 && strings.EqualFold(args[0], "hello") {
		return []byte("-ERR unknown command 'HELLO'\r\n")
	}
	return []byte("+OK\r\n")
}

// readCommand reads one command, an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, errors.New("not an array")
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<16 {
		return nil, errors.New("bad array length")
	}
	args := make([]string, 0, n)
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 || size > 1<<24 {
			return nil, errors.New("bad bulk length")
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:size]))
	}
	return args, nil
}

// Bulk returns s as a RESP bulk string.
func Bulk(s string) []byte {
	return []byte("$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n")
}
