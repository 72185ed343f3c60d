package main

import (
	"fmt"
	"net"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
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

// listenAddrs are where the sidecar listens, its flags: grpcUDS
// (--grpc-uds) is used instead of grpc (--grpc-addr) when set; admin and
// debug are empty when they have no listener of their own, and metrics
// (--metrics-addr) has one only when it is not http (separateMetrics).
type listenAddrs struct {
	grpc, grpcUDS, http, admin string
	debug, metrics             string
}

// listen opens every listener, or none, each capped at its number of
// connections by b.
func listen(a listenAddrs, b *bounds.Server) (*listeners, error) {
	var l listeners
	var err error
	if l.grpc, err = listenGRPC(a); err != nil {
		return nil, err
	}
	if l.http, err = net.Listen("tcp", a.http); err != nil {
		l.grpc.Close()
		return nil, fmt.Errorf("listen --http-addr: %w", err)
	}
	if a.admin != "" {
		if l.admin, err = net.Listen("tcp", a.admin); err != nil {
			l.grpc.Close()
			l.http.Close()
			return nil, fmt.Errorf("listen --admin-addr: %w", err)
		}
		l.admin = b.CapHTTP(l.admin)
	}
	if err := l.listenRef(a, b); err != nil {
		return nil, err
	}
	l.grpc = b.CapGRPC(l.grpc)
	l.http = b.CapHTTP(l.http)
	return &l, nil
}

// capped returns the listeners that cap their connections, by name.
func (l *listeners) capped() map[string]metrics.CappedListener {
	all := map[string]net.Listener{"grpc": l.grpc, "http": l.http, "admin": l.admin, "debug": l.debug, "metrics": l.metrics}
	out := make(map[string]metrics.CappedListener, len(all))
	for name, x := range all {
		if c, ok := x.(*bounds.Listener); ok {
			out[name] = c
		}
	}
	return out
}

// addrs are the listeners' addresses, "" for those not open; admin is
// where the admin endpoints are served.
func (l *listeners) addrs() listenAddrs {
	return listenAddrs{grpc: l.grpc.Addr().String(), http: l.http.Addr().String(), admin: l.adminAddr(),
		debug: addrOf(l.debug), metrics: addrOf(l.metrics)}
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
func (a listenAddrs) separateMetrics() bool {
	return a.metrics != "" && !sameAddr(a.metrics, a.http)
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
func listenGRPC(a listenAddrs) (net.Listener, error) {
	if a.grpcUDS == "" {
		l, err := net.Listen("tcp", a.grpc)
		if err != nil {
			return nil, fmt.Errorf("listen --grpc-addr: %w", err)
		}
		return l, nil
	}
	l, err := bounds.ListenUnix(a.grpcUDS)
	if err != nil {
		return nil, fmt.Errorf("listen --grpc-uds: %w", err)
	}
	return l, nil
}

// listenRef opens the debug and metrics listeners that a asks for,
// into l, capped by b. On an error it closes every listener of l.
func (l *listeners) listenRef(a listenAddrs, b *bounds.Server) error {
	var err error
	closeAll := func() {
		for _, x := range []net.Listener{l.grpc, l.http, l.admin, l.debug} {
			if x != nil {
				x.Close()
			}
		}
	}
	if a.debug != "" {
		if l.debug, err = net.Listen("tcp", a.debug); err != nil {
			closeAll()
			return fmt.Errorf("listen --debug-addr: %w", err)
		}
		l.debug = b.CapHTTP(l.debug)
	}
	if a.separateMetrics() {
		if l.metrics, err = net.Listen("tcp", a.metrics); err != nil {
			closeAll()
			return fmt.Errorf("listen --metrics-addr: %w", err)
		}
		l.metrics = b.CapHTTP(l.metrics)
	}
	return nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}
