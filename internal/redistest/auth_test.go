package redistest

import (
	"bufio"
	"context"
	"net"
	"testing"
)

// TestAwaitAuthenticated: a connection that has sent nothing is counted
// as waiting to authenticate, and no longer once it has sent a command.
func TestAwaitAuthenticated(t *testing.T) {
	s := StartServer(t)
	c := s.Client(t)
	raw, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// The server may accept raw after it answers a first CLIENT LIST:
	// ask until it lists raw. Bounded.
	var waiting map[string]bool
	for range 1000 {
		list, err := c.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if waiting = unauthenticated(list); len(waiting) > 0 {
			break
		}
	}
	if len(waiting) != 1 {
		t.Fatalf("connections waiting: %v, want the raw one", waiting)
	}
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(raw).ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", line, err)
	}
	AwaitAuthenticated(t, c)
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if w := unauthenticated(list); len(w) != 0 {
		t.Errorf("after PING: waiting %v, want none", w)
	}
}
