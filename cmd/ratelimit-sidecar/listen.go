package main

import (
	"fmt"
	"net"
	"time"

	caplisten "github.com/ratelimit-sidecar/ratelimit-sidecar/internal/listen" // listen is this file's func
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// The sidecar's sockets: gRPC on TCP or a Unix socket, HTTP, and the
// admin, debug and metrics listeners when their flags ask for them,
// each capped at its number of connections.

// listeners are the sidecar's sockets. admin is nil unless --admin-addr
// is set, debug unless --debug-addr is, and metrics unless --metrics-addr
// is set to an address other than --http-addr.
type listeners struct {
	grpc, http, admin net.Listener
	debug, metrics    net.Listener
}

// listen opens every listener, or none, each capped at its number of
// connections.
func listen(c *settings) (*listeners, error) {
	var l listeners
	var err error
	if l.grpc, err = listenGRPC(c); err != nil {
		return nil, err
	}
	if l.http, err = net.Listen("tcp", c.httpAddr); err != nil {
		l.grpc.Close()
		return nil, fmt.Errorf("listen --http-addr: %w", err)
	}
	if c.adminAddr != "" {
		if l.admin, err = net.Listen("tcp", c.adminAddr); err != nil {
			l.grpc.Close()
			l.http.Close()
			return nil, fmt.Errorf("listen --admin-addr: %w", err)
		}
		l.admin = limitListener(l.admin, c.bounds.httpMaxConns, 0)
	}
	if err := l.listenRef(c); err != nil {
		return nil, err
	}
	l.grpc = limitListener(l.grpc, c.bounds.grpcMaxConns, c.bounds.grpcWorking())
	l.http = limitListener(l.http, c.bounds.httpMaxConns, 0)
	return &l, nil
}

// capped returns the listeners that cap their connections, by name.
func (l *listeners) capped() map[string]metrics.CappedListener {
	all := map[string]net.Listener{"grpc": l.grpc, "http": l.http, "admin": l.admin, "debug": l.debug, "metrics": l.metrics}
	out := make(map[string]metrics.CappedListener, len(all))
	for name, x := range all {
		if c, ok := x.(*caplisten.Listener); ok {
			out[name] = c
		}
	}
	return out
}

// adminAddr is where the admin endpoints are served.
func (l *listeners) adminAddr() string {
	if l.admin != nil {
		return l.admin.Addr().String()
	}
	return l.http.Addr().String()
}

// separateMetrics reports whether the metrics have a listener of their
// own: --metrics-addr is set and is not --http-addr.
func (c *settings) separateMetrics() bool {
	return c.metricsAddr != "" && !sameAddr(c.metricsAddr, c.httpAddr)
}

// sameAddr reports whether two listen addresses are the same port on the
// same host, taking an empty host, 0.0.0.0 and :: as every address. Port
// 0 is a free port, never another's.
func sameAddr(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa == "0" {
		return false
	}
	norm := func(h string) string {
		if h == "" || h == "0.0.0.0" || h == "::" {
			return ""
		}
		return h
	}
	return pa == pb && norm(ha) == norm(hb)
}

// listenGRPC opens the gRPC listener: the Unix socket of --grpc-uds, or
// --grpc-addr.
func listenGRPC(c *settings) (net.Listener, error) {
	if c.grpcUDS == "" {
		l, err := net.Listen("tcp", c.grpcAddr)
		if err != nil {
			return nil, fmt.Errorf("listen --grpc-addr: %w", err)
		}
		return l, nil
	}
	l, err := caplisten.Unix(c.grpcUDS)
	if err != nil {
		return nil, fmt.Errorf("listen --grpc-uds: %w", err)
	}
	return l, nil
}

// listenRef opens the debug and metrics listeners that the settings ask
// for, into l. On an error it closes every listener of l.
func (l *listeners) listenRef(c *settings) error {
	var err error
	closeAll := func() {
		for _, x := range []net.Listener{l.grpc, l.http, l.admin, l.debug} {
			if x != nil {
				x.Close()
			}
		}
	}
	if c.debugAddr != "" {
		if l.debug, err = net.Listen("tcp", c.debugAddr); err != nil {
			closeAll()
			return fmt.Errorf("listen --debug-addr: %w", err)
		}
		l.debug = limitListener(l.debug, c.bounds.httpMaxConns, 0)
	}
	if c.separateMetrics() {
		if l.metrics, err = net.Listen("tcp", c.metricsAddr); err != nil {
			closeAll()
			return fmt.Errorf("listen --metrics-addr: %w", err)
		}
		l.metrics = limitListener(l.metrics, c.bounds.httpMaxConns, 0)
	}
	return nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// limitListener caps the connections l has open at once at n (0: no
// cap). A new client never waits for room: of the connections not
// working, the one that has sent nothing for longest, of the peer holding
// the most, is closed for it, so no client can hold the cap
// (internal/listen). A connection works for working after its last call
// (gRPC's are told by internal/bounds) and while a request is in flight
// (HTTP's, from ConnState).
func limitListener(l net.Listener, n int, working time.Duration) net.Listener {
	if n <= 0 {
		return l
	}
	cl := caplisten.New(l, n)
	cl.Working = working
	return cl
}
