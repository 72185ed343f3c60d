package redis

import (
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// A watch follows the configuration errors (see ConfigError) of the
// nodes and sentinels a store talks to, through a hook on each of their
// clients (watchHook), so that every refusal is seen with the address
// that made it, whichever call met it: a request, a probe, a connection
// being set up, a sentinel query.
//
// A node's refusal lasts until the node shows it is over:
//   - authentication and TLS, until a connection to it authenticates
//     (HELLO or AUTH succeeds, which also needs the TLS handshake to have
//     succeeded);
//   - any kind, on a Redis node, until the store's probe script runs
//     there (see Probe), which calls every command the store's scripts
//     call, on a key of the store's prefix;
//   - any kind, on a sentinel, until a sentinel query succeeds there.
//
// A watch outlives the stores and clients that a Lazy store makes while
// it tries to connect. It is safe for concurrent use.
type watch struct {
	// onChange, if set, is called for each refusal that starts or
	// changes (cleared false) and ends (cleared true), with w.mu held,
	// so in order.
	onChange func(e *ConfigError, cleared bool)

	n      atomic.Int32 // len(errs), so that successes skip the lock while it is 0
	total  [3]atomic.Uint64
	active [3]atomic.Int32

	mu   sync.Mutex
	errs map[string]*ConfigError // by source (see watchHook.key)

	sniffs *sniffer // questions to ports that may speak the other protocol
}

// newWatch returns a watch that calls onChange, if set, for each change
// (see watch.onChange). Close it to stop its goroutines.
func newWatch(onChange func(*ConfigError, bool)) *watch {
	return &watch{onChange: onChange, errs: map[string]*ConfigError{}, sniffs: newSniffer()}
}

// close stops the watch's goroutines and waits for them.
func (w *watch) close() { w.sniffs.close() }

// kindIndex returns the index of kind in ConfigErrorKinds, or -1.
func kindIndex(kind string) int { return slices.Index(ConfigErrorKinds, kind) }

// record sets the refusal of source key to e, unless it is that already.
func (w *watch) record(key string, e *ConfigError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.errs[key]; old != nil && *old == *e {
		return
	}
	w.errs[key] = e
	w.changed()
	w.total[kindIndex(e.Kind)].Add(1)
	if w.onChange != nil {
		w.onChange(e, false)
	}
}

// clear ends the refusal of source key if it is of one of kinds (of any
// kind if none is given).
func (w *watch) clear(key string, kinds ...string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.errs[key]
	if e == nil || len(kinds) > 0 && !slices.Contains(kinds, e.Kind) {
		return
	}
	w.drop(key, e)
}

// clearRole ends the refusals of every source of role.
func (w *watch) clearRole(role string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, e := range w.errs {
		if e.Role == role {
			w.drop(key, e)
		}
	}
}

// drop removes the refusal e of source key. w.mu must be held.
func (w *watch) drop(key string, e *ConfigError) {
	delete(w.errs, key)
	w.changed()
	if w.onChange != nil {
		w.onChange(e, true)
	}
}

// changed updates n and active after errs changed. w.mu must be held.
func (w *watch) changed() {
	w.n.Store(int32(len(w.errs)))
	var active [3]int32
	for _, e := range w.errs {
		active[kindIndex(e.Kind)]++
	}
	for i := range active {
		w.active[i].Store(active[i])
	}
}

// list returns the refusals that last, by role and address.
func (w *watch) list() []*ConfigError {
	if w.n.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*ConfigError, 0, len(w.errs))
	for _, e := range w.errs {
		c := *e
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *ConfigError) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.Addr, b.Addr))
	})
	return out
}

// hook returns the hook for the client of one source: a Redis node, or
// a sentinel, of role at addr, which the client speaks TLS to or not.
func (w *watch) hook(role, addr string, useTLS bool) *watchHook {
	return &watchHook{w: w, role: role, key: role + " " + addr, addr: func() string { return addr }, tls: useTLS}
}

// watchHook reports what one client meets to a watch. The store's calls
// go through it: on success it costs an atomic load, unless a refusal
// lasts.
type watchHook struct {
	w    *watch
	role string
	// key names the source in w. A Sentinel's master has one key, whatever
	// its address, so that a failover ends what the old master refused.
	key string
	// addr returns the source's address now.
	addr func() string
	// tls tells whether the client speaks TLS to the source.
	tls bool
}

var _ goredis.Hook = (*watchHook)(nil)

func (h *watchHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.failed(err, dialing)
		}
		return conn, err
	}
}

func (h *watchHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.failed(err, cmd.Name())
		} else if h.w.n.Load() != 0 {
			h.succeeded(cmd)
		}
		return err
	}
}

func (h *watchHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && h.w.n.Load() == 0 {
			return nil
		}
		seen := false
		for _, cmd := range cmds {
			if cerr := cmd.Err(); cerr != nil {
				if !seen {
					seen = h.failed(cerr, cmd.Name())
				}
			} else if h.w.n.Load() != 0 {
				h.succeeded(cmd)
			}
		}
		if err != nil && !seen {
			h.failed(err, "")
		}
		return err
	}
}

// dialing stands for the command name of a failure to connect (and, for
// TLS, to shake hands).
const dialing = "(dial)"

// failed records err, met by command name ("" for none, dialing for the
// connection itself), if it is a configuration error, and reports
// whether it was. A failure of a new connection that a port spoken to
// in the wrong protocol would cause has the port asked (see sniff.go).
func (h *watchHook) failed(err error, name string) bool {
	if errors.As(err, new(*sentinelError)) {
		// A sentinel's refusal, on the way to the master: the sentinel's
		// own client reports it.
		return false
	}
	kind, msg := classify(err)
	if kind == "" && (name == dialing || name == "hello" || name == "auth") && mismatched(err, h.tls) {
		h.w.sniff(h.key, h.role, h.addr(), h.tls)
	}
	if kind == "" || kind == KindACL && tolerated(name) {
		return false
	}
	h.w.record(h.key, &ConfigError{Kind: kind, Role: h.role, Addr: h.addr(), Msg: msg})
	return true
}

// succeeded ends the refusal of h's source that cmd's success shows over.
func (h *watchHook) succeeded(cmd goredis.Cmder) {
	name := cmd.Name()
	switch {
	case name == "hello" || name == "auth":
		h.w.clear(h.key, KindAuth, KindTLS)
	case h.role == RoleSentinel && !tolerated(name):
		h.w.clear(h.key)
	case h.role != RoleSentinel && isProbe(cmd):
		h.w.clear(h.key)
	}
}

// tolerated reports whether the store does without command name, so
// that an ACL refusing it is no configuration error: go-redis sends
// HELLO and CLIENT when it connects and goes on without them, the
// Sentinel store asks HELLO for the role and takes no answer for a yes,
// and the store only measures round trips with PING.
func tolerated(name string) bool {
	switch name {
	case "hello", "auth", "client", "ping":
		return true
	}
	return false
}

// isProbe reports whether cmd runs the probe script (see Probe).
func isProbe(cmd goredis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1] == probeScript.Hash()
	case "eval":
		return args[1] == probeSrc
	}
	return false
}
