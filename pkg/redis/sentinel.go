package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Sentinel failover, and why the store does not leave it to go-redis's
// FailoverClient.
//
// A graceful failover (SENTINEL FAILOVER, or any the sentinels start
// while the master is still up) goes, as measured on Redis 7.0 with the
// leading sentinel's events:
//
//	+failover-state-send-slaveof-noone    the sentinel picked the replica
//	  ~60 ms (one sentinel tick)
//	the replica runs REPLICAOF NO ONE     two masters from here on
//	  ~1 s (the sentinel reads the replica's INFO once a second)
//	+switch-master                        go-redis switches here
//	  ~10 s
//	+convert-to-slave                     the old master becomes a replica
//
// Nothing pauses the old master's clients: it takes writes until it is
// converted, and then replaces its data with the new master's. A
// FailoverClient keeps writing to it until +switch-master, so for about
// a second every hit it counts is lost, and every request it admitted
// then is admitted a second time by the new master.
//
// sentinelMaster instead listens to every configured sentinel (only the
// one leading a failover publishes its steps; the others publish just
// +switch-master, a few ms after it), and at
// +failover-state-send-slaveof-noone for its master fences the store: no
// connection made before writes again, and none is made, so requests fail
// (by the failure mode) instead of writing to a master about to be
// replaced. It then asks the chosen replica for its role (HELLO) every
// promotionPoll and switches to it the moment it says master, without
// waiting for +switch-master (which it also follows, as it does
// +promoted-slave; an abort lifts the fence). Writes the old master took
// before the fence are on the replica once replication delivered them,
// which on a healthy link takes far less than the tick between the event
// and the promotion. See docs/redis-failover.md for the bound.

// Sentinel events the store follows.
const (
	evFencing  = "+failover-state-send-slaveof-noone"
	evPromoted = "+promoted-slave"
	evSwitch   = "+switch-master"
)

// evAborts are the events of a failover that ends without a switch.
var evAborts = []string{
	"-failover-abort-not-elected",
	"-failover-abort-no-good-slave",
	"-failover-abort-slave-timeout",
	"-failover-abort-master-is-replica",
}

// promotionPoll is how often a fenced store asks the promoted replica
// whether it is a master yet: the fence, and the failures it causes,
// outlast the promotion by at most about this.
const promotionPoll = 2 * time.Millisecond

// fenceLimit bounds a fence that neither a promotion, a switch nor an
// abort ends, say because those events were lost: the store then asks
// the sentinels for the master again. A promotion normally follows the
// fence within one sentinel tick (at most 100 ms).
const fenceLimit = 2 * time.Second

// Errors of a Sentinel store's connections. Like every error that is not
// a reply from Redis, wrap makes them wrap ErrStoreUnavailable. The two
// of a switch the store follows also wrap limits.ErrStoreSwitching, so
// that a circuit breaker lets the calls after the switch through.
var (
	errFailingOver   = fmt.Errorf("sentinel failover under way: not writing to the old master: %w", limits.ErrStoreSwitching)
	errMasterChanged = fmt.Errorf("sentinel master changed: connection to the old one closed: %w", limits.ErrStoreSwitching)
	errNotMaster     = errors.New("the node the sentinels named is not a master")
)

// sentinelMaster follows the master that a set of sentinels monitor, for
// the store's client: it dials the master it knows, and bumps gen
// whenever connections made before must not write again. It is safe for
// concurrent use; close stops its goroutines.
type sentinelMaster struct {
	name      string
	sentinels []*goredis.SentinelClient
	addrs     []string        // of the sentinels, in order
	node      goredis.Options // for the data nodes; Addr is set per node
	tls       *tls.Config

	gen atomic.Uint64

	mu        sync.Mutex
	addr      string // "" until known, or once a refusal said it is not
	fenced    string // the replica being promoted, while fenced
	stopFence context.CancelFunc

	closed bool // close was called; no fence starts

	resolveMu sync.Mutex // one resolution at a time

	stop context.CancelFunc // stops the listeners
	wg   sync.WaitGroup
}

// newSentinelMaster follows master name through the sentinels at addrs,
// which it reaches with sopts (Addr set per sentinel); node is how to
// reach a data node (Addr set per node). It starts one goroutine per
// sentinel, which listens to its events. If w is not nil, it watches
// the sentinels' clients.
func newSentinelMaster(name string, addrs []string, sopts, node goredis.Options, w *watch) *sentinelMaster {
	ctx, stop := context.WithCancel(context.Background())
	m := &sentinelMaster{name: name, node: node, tls: node.TLSConfig, stop: stop, addrs: addrs}
	for _, a := range addrs {
		o := sopts
		o.Addr = a
		sc := newSentinelClient(&o)
		if w != nil {
			// Before Subscribe, so that the listener's connection is
			// watched too.
			sc.AddHook(w.hook(RoleSentinel, a, o.TLSConfig != nil))
		}
		m.sentinels = append(m.sentinels, sc)
		m.wg.Go(func() { m.listen(ctx, sc) })
	}
	return m
}

// close stops listening, and any fence, and closes the sentinel clients.
func (m *sentinelMaster) close() {
	m.mu.Lock()
	m.closed = true
	m.endFence()
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	for _, sc := range m.sentinels {
		_ = sc.Close()
	}
}

// listen follows the events of sentinel sc until ctx ends. go-redis
// subscribes again after a broken connection; events sent meanwhile are
// lost (see fenceLimit and forget for what covers them).
func (m *sentinelMaster) listen(ctx context.Context, sc *goredis.SentinelClient) {
	chans := append([]string{evFencing, evPromoted, evSwitch}, evAborts...)
	ps := sc.Subscribe(ctx, chans...)
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			m.event(msg.Channel, strings.Fields(msg.Payload))
		}
	}
}

// event handles a sentinel event: its channel and its payload's fields.
func (m *sentinelMaster) event(channel string, f []string) {
	switch channel {
	case evFencing, evPromoted:
		// slave <name> <ip> <port> @ <master> <ip> <port>
		if len(f) != 8 || f[0] != "slave" || f[4] != "@" || f[5] != m.name {
			return
		}
		replica := net.JoinHostPort(f[2], f[3])
		if channel == evFencing {
			m.fence(replica)
		} else {
			m.switchTo(replica)
		}
	case evSwitch:
		// <master> <old ip> <old port> <new ip> <new port>
		if len(f) == 5 && f[0] == m.name {
			m.switchTo(net.JoinHostPort(f[3], f[4]))
		}
	default: // an abort: master <name> <ip> <port>
		if len(f) >= 2 && f[0] == "master" && f[1] == m.name {
			m.unfence()
		}
	}
}

// fence stops writes to the current master, while replica is promoted,
// and starts watching for the promotion.
func (m *sentinelMaster) fence(replica string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced == replica || m.addr == replica || m.closed {
		return // fenced already, switched already, or closing
	}
	m.endFence()
	m.fenced = replica
	m.gen.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), fenceLimit)
	m.stopFence = cancel
	m.wg.Go(func() { m.awaitPromotion(ctx, replica) })
}

// endFence ends a fence, if any, and its watch. m.mu must be held.
func (m *sentinelMaster) endFence() {
	if m.stopFence != nil {
		m.stopFence()
		m.stopFence = nil
	}
	m.fenced = ""
}

// unfence ends a fence without a switch: the failover was aborted, or
// its end was not seen within fenceLimit. The master is asked for again.
func (m *sentinelMaster) unfence() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unfenceLocked()
}

// unfenceLocked is unfence with m.mu held.
func (m *sentinelMaster) unfenceLocked() {
	if m.fenced == "" {
		return
	}
	m.endFence()
	m.addr = ""
	m.gen.Add(1)
}

// switchTo makes addr the master, ending any fence, and closes the
// connections to the old one (at their next write).
func (m *sentinelMaster) switchTo(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.switchLocked(addr)
}

// switchLocked is switchTo with m.mu held.
func (m *sentinelMaster) switchLocked(addr string) {
	if m.addr == addr && m.fenced == "" {
		return // a later sentinel's news of the same switch
	}
	m.endFence()
	m.addr = addr
	m.gen.Add(1)
}

// forget drops the master's address after it refused a write as a
// replica, so the next connection asks the sentinels again. It bumps gen
// only while the refusing master is still the current one.
func (m *sentinelMaster) forget(gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced != "" || !m.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	m.addr = ""
}

// awaitPromotion asks replica for its role every promotionPoll until it
// says master, then switches to it; or, if ctx ends first at
// fenceLimit, lifts the fence.
func (m *sentinelMaster) awaitPromotion(ctx context.Context, replica string) {
	o := m.node
	o.Addr = replica
	o.Dialer, o.OnConnect = nil, nil
	c := newClient(&o)
	defer c.Close()
	t := time.NewTicker(promotionPoll)
	defer t.Stop()
	for {
		if role, err := role(ctx, c); err == nil && role == "master" {
			m.promoted(replica)
			return
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				m.unfenceFor(replica)
			}
			return
		case <-t.C:
		}
	}
}

// promoted switches to replica if it is still the one being promoted.
func (m *sentinelMaster) promoted(replica string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced == replica {
		m.switchLocked(replica)
	}
}

// unfenceFor lifts the fence if it is still the one for replica.
func (m *sentinelMaster) unfenceFor(replica string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced == replica {
		m.unfenceLocked()
	}
}

// master returns the master's address and the generation of connections
// to it, asking the sentinels if need be. It fails while fenced.
func (m *sentinelMaster) master(ctx context.Context) (string, uint64, error) {
	for range 2 {
		m.mu.Lock()
		addr, fenced, gen := m.addr, m.fenced, m.gen.Load()
		m.mu.Unlock()
		switch {
		case fenced != "":
			return "", 0, errFailingOver
		case addr != "":
			return addr, gen, nil
		}
		if err := m.resolve(ctx, gen); err != nil {
			return "", 0, err
		}
	}
	return "", 0, errMasterChanged // forgotten again while resolving
}

// resolve asks the sentinels for the master's address, all at once,
// and takes the first answer, unless gen changed meanwhile (a fence or a
// switch, which know better).
func (m *sentinelMaster) resolve(ctx context.Context, gen uint64) error {
	m.resolveMu.Lock()
	defer m.resolveMu.Unlock()
	m.mu.Lock()
	known := m.addr != "" || m.fenced != "" || m.gen.Load() != gen
	m.mu.Unlock()
	if known {
		return nil // resolved, fenced or switched meanwhile
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A slot per sentinel, so that no query blocks once the first
	// answer is taken.
	answers := make(chan []string, len(m.sentinels))
	errs := make(chan error, len(m.sentinels))
	var wg sync.WaitGroup
	for i, sc := range m.sentinels {
		wg.Go(func() {
			a, err := sc.GetMasterAddrByName(ctx, m.name).Result()
			if err == nil && len(a) != 2 {
				err = errors.New("bad master address reply")
			}
			if err != nil {
				errs <- &sentinelError{addr: m.addrs[i], err: err}
				return
			}
			answers <- a
		})
	}
	defer wg.Wait()
	var all []error
	for range m.sentinels {
		select {
		case a := <-answers:
			cancel()
			m.mu.Lock()
			if m.gen.Load() == gen && m.fenced == "" {
				m.addr = net.JoinHostPort(a[0], a[1])
			}
			m.mu.Unlock()
			return nil
		case err := <-errs:
			all = append(all, err)
		}
	}
	return errors.Join(append([]error{errors.New("no sentinel named the master")}, all...)...)
}

// current returns the master's address as far as m knows it: "" until
// the sentinels named it, and after a refusal said it is not the master.
func (m *sentinelMaster) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// sentinelError is a sentinel's failure to name the master.
type sentinelError struct {
	addr string
	err  error
}

func (e *sentinelError) Error() string { return "sentinel " + e.addr + ": " + e.err.Error() }
func (e *sentinelError) Unwrap() error { return e.err }

// dial is the Dialer of the store's client: it connects to the master,
// and the connection refuses to write once the master changes or a
// failover fences it. While fenced it returns a fencedConn.
func (m *sentinelMaster) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	addr, gen, err := m.master(ctx)
	if errors.Is(err, errFailingOver) {
		return fencedConn{}, nil
	}
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: m.node.DialTimeout, KeepAlive: 5 * time.Minute}
	var conn net.Conn
	if m.tls == nil {
		conn, err = d.DialContext(ctx, network, addr)
	} else {
		td := &tls.Dialer{NetDialer: d, Config: m.tls}
		conn, err = td.DialContext(ctx, network, addr)
	}
	if err != nil {
		return nil, err
	}
	mc := &masterConn{Conn: conn, m: m, gen: gen}
	if sc, ok := conn.(syscall.Conn); ok {
		return masterTCPConn{mc, sc}, nil
	}
	return mc, nil
}

// onConnect checks that a new connection is to a master: a sentinel may
// still name a master that has been made a replica. A Redis that does
// not say passes.
func (m *sentinelMaster) onConnect(ctx context.Context, cn *goredis.Conn) error {
	r, err := role(ctx, cn)
	if err != nil {
		return err
	}
	if r != "master" && r != "" {
		m.mu.Lock()
		if m.fenced == "" {
			m.addr = ""
			m.gen.Add(1)
		}
		m.mu.Unlock()
		return errNotMaster
	}
	return nil
}

// role returns the replication role ("master" or "replica") that the
// node c is connected to reports in HELLO, which, unlike ROLE and INFO,
// every ACL user may call; "" if it reports none, or has no HELLO
// (before Redis 6).
func role(ctx context.Context, c interface {
	Do(ctx context.Context, args ...any) *goredis.Cmd
}) (string, error) {
	reply, err := c.Do(ctx, "HELLO").Result()
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		return "", nil // refused: the node cannot say
	}
	if err != nil {
		return "", err
	}
	switch r := reply.(type) {
	case map[any]any: // RESP3
		v, _ := r["role"].(string)
		return v, nil
	case []any: // RESP2: field, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == "role" {
				v, _ := r[i+1].(string)
				return v, nil
			}
		}
	}
	return "", nil
}

// masterConn is a connection to the master of generation gen. It refuses
// to write once gen is past, and go-redis then closes it: so a switch
// or a fence reaches the connections in use and in the pool alike, with
// no command sent on them.
type masterConn struct {
	net.Conn
	m   *sentinelMaster
	gen uint64
}

func (c *masterConn) Write(b []byte) (int, error) {
	if c.m.gen.Load() != c.gen {
		return 0, errMasterChanged
	}
	return c.Conn.Write(b)
}

// masterTCPConn is a masterConn over TCP without TLS, whose socket
// go-redis's pool can look at to drop connections that died while idle,
// as it does for its own connections.
type masterTCPConn struct {
	*masterConn
	sc syscall.Conn
}

func (c masterTCPConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// fencedConn is the connection dial makes while a failover is fenced: it
// refuses to write, so the request fails at once, as one on an old
// connection does, and go-redis drops it. dial does not fail instead,
// because go-redis counts failed dials: once a pool's PoolSize have
// failed in a row, it fails every dial for the next second, which would
// outlast the fence by that second.
type fencedConn struct{}

func (fencedConn) Read([]byte) (int, error)         { return 0, errFailingOver }
func (fencedConn) Write([]byte) (int, error)        { return 0, errFailingOver }
func (fencedConn) Close() error                     { return nil }
func (fencedConn) LocalAddr() net.Addr              { return fencedAddr{} }
func (fencedConn) RemoteAddr() net.Addr             { return fencedAddr{} }
func (fencedConn) SetDeadline(time.Time) error      { return nil }
func (fencedConn) SetReadDeadline(time.Time) error  { return nil }
func (fencedConn) SetWriteDeadline(time.Time) error { return nil }

// fencedAddr is both addresses of a fencedConn.
type fencedAddr struct{}

func (fencedAddr) Network() string { return "tcp" }
func (fencedAddr) String() string  { return "sentinel-fence:0" }

// readOnlyHook forgets the master when it refuses a command as a
// read-only replica: it was made one without the store hearing of it.
type readOnlyHook struct{ m *sentinelMaster }

func (h readOnlyHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h readOnlyHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		gen := h.m.gen.Load()
		// The command's own error is set only once the hooks return.
		err := next(ctx, cmd)
		if goredis.IsReadOnlyError(err) {
			h.m.forget(gen)
		}
		return err
	}
}

func (h readOnlyHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		gen := h.m.gen.Load()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if goredis.IsReadOnlyError(cmd.Err()) || goredis.IsReadOnlyError(err) {
				h.m.forget(gen)
				break
			}
		}
		return err
	}
}
