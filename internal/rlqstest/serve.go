package rlqstest

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Serve serves a gRPC server on a free loopback port, with the services
// register registers, until the test ends, and returns its address.
func Serve(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	g := grpc.NewServer()
	register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// DialT opens a stream to addr for domain, in plaintext, as Envoy's
// filter with no_assignment_behavior DENY_ALL on the clock now, and
// closes it when the test ends.
func DialT(t testing.TB, addr, domain string, now func() time.Time) *Envoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e, err := Dial(context.Background(), conn, domain, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
