// Package redistest starts private redis-server processes for tests.
//
// Every process listens on a free 127.0.0.1 port, keeps no data on disk
// (no RDB, no AOF), works in its own t.TempDir() and is stopped by
// t.Cleanup, also when the test fails or panics. A Redis that happens to
// be running on the machine is never used.
//
// If redis-server (or redis-cli for clusters) is not on PATH the test
// fails, telling to run `make test`, unless RLS_SKIP_REDIS=1 is set, in
// which case the test is skipped.
package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timeouts and polling interval of the helpers.
const (
	startTimeout   = 10 * time.Second
	formTimeout    = 30 * time.Second
	pollInterval   = 20 * time.Millisecond
	cmdTimeout     = time.Second
	stopGrace      = 2 * time.Second
	waitDelay      = 2 * time.Second
	portAttempts   = 10
	maxClusterPort = 55535
	outputLimit    = 1 << 20
)

// SkipEnv is the environment variable that turns a missing redis-server
// into a skipped test instead of a failed one when set to "1".
const SkipEnv = "RLS_SKIP_REDIS"

// requireBinary returns the path of the named binary, or fails or skips the
// test when it is not on PATH.
func requireBinary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("redistest: %s not found on PATH and %s=1: skipping", name, SkipEnv)
	}
	t.Fatalf("redistest: %s not found on PATH: run `make test`, which installs it (or set %s=1 to skip tests needing Redis)", name, SkipEnv)
	return ""
}

// Option configures a server started by StartServer.
type Option func(*config)

type config struct {
	args     []string
	cluster  bool
	sentinel string // sentinel.conf body, without the port line; empty for a data node
}

// WithArgs appends extra redis-server command line arguments, such as
// "--maxmemory", "10mb". They come after the defaults, so they can
// override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// withCluster runs the server in cluster mode with a cluster bus port of
// port+10000.
func withCluster() Option {
	return func(c *config) { c.cluster = true }
}

// withSentinel runs the server as a sentinel with the given configuration.
func withSentinel(conf string) Option {
	return func(c *config) { c.sentinel = conf }
}

// Server is a private redis-server process.
type Server struct {
	// Addr is the "127.0.0.1:port" address the server listens on.
	Addr string

	port int
	dir  string
	cfg  config
	bin  string

	mu   sync.Mutex
	proc *process
	logs []string // output of earlier incarnations
}

// StartServer starts a standalone redis-server on a free loopback port and
// waits until it answers PING. The process is stopped at test cleanup.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{bin: requireBinary(t, "redis-server"), dir: t.TempDir(), cfg: cfg}
	t.Cleanup(func() { s.cleanup(t) })

	var lastErr error
	for range portAttempts {
		port, err := freePort(cfg.cluster)
		if err != nil {
			t.Fatalf("redistest: pick free port: %v", err)
		}
		s.port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.start()
		if err == nil {
			return s
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	t.Fatalf("redistest: start %s: %v", s.name(), lastErr)
	return nil
}

// Kill sends SIGKILL to the server process, simulating a crash, and waits
// for it to exit. It is safe to call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
}

// Restart starts the server again on the same port with the same
// configuration and waits until it answers PING. A running process is
// killed first. Data is not preserved, but files the server itself keeps
// in its directory are: a cluster node keeps its nodes.conf (so it rejoins
// its cluster) and a sentinel its rewritten sentinel.conf.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	// The port is normally free at once, but another process may grab it
	// in between, so retry briefly before giving up.
	deadline := time.Now().Add(time.Second)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restart %s: %v", s.name(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PID returns the process ID of the server's current process (it changes
// on Restart), or 0 if it has none, so that a benchmark can read the
// process's CPU time from /proc.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a go-redis client for the server, closed at test cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// name describes the server in messages.
func (s *Server) name() string {
	if s.cfg.sentinel != "" {
		return "redis-sentinel " + s.Addr
	}
	return "redis-server " + s.Addr
}

// args returns the command line of the server.
func (s *Server) args() ([]string, error) {
	port := strconv.Itoa(s.port)
	var args []string
	if s.cfg.sentinel != "" {
		// Sentinel needs a writable config file; it rewrites it on changes,
		// so keep the rewritten file across restarts.
		conf := s.dir + "/sentinel.conf"
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(conf, []byte(s.cfg.sentinel), 0o600); err != nil {
				return nil, fmt.Errorf("write sentinel config: %w", err)
			}
		}
		args = append(args, conf, "--sentinel")
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--port", port,
		"--dir", s.dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", "",
	)
	if s.cfg.sentinel == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if s.cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", s.dir+"/nodes.conf",
			"--cluster-node-timeout", "5000",
		)
	}
	return append(args, s.cfg.args...), nil
}

// start starts a process on s.port and waits until it answers PING.
func (s *Server) start() error {
	args, err := s.args()
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.proc != nil {
		s.logs = append(s.logs, s.proc.output())
	}
	p, err := startProcess(s.bin, args)
	s.proc = p
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := waitReady(p, s.Addr); err != nil {
		p.kill()
		return err
	}
	return nil
}

// cleanup stops the process and logs its output if the test failed.
func (s *Server) cleanup(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.stop()
	if t.Failed() {
		logs := append(s.logs, s.proc.output())
		for i, out := range logs {
			t.Logf("redistest: %s output (run %d of %d):\n%s", s.name(), i+1, len(logs), out)
		}
	}
}

// errAddrInUse reports that the server could not bind its port.
var errAddrInUse = errors.New("address already in use")

// waitReady polls the server with PING until it answers PONG, the process
// exits, or startTimeout passes.
func waitReady(p *process, addr string) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			out := p.output()
			if strings.Contains(out, "Address already in use") {
				return fmt.Errorf("process exited (%v): %w", p.waitErr, errAddrInUse)
			}
			return fmt.Errorf("process exited before answering PING (%v); its output is logged below", p.waitErr)
		default:
		}
		reply, err := do(addr, 200*time.Millisecond, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("unexpected PING reply %q", reply)
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %v", startTimeout, lastErr)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// poll calls cond every pollInterval until it returns nil or timeout
// passes, and returns the last error in that case.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v: %w", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// freePort returns a port on 127.0.0.1 that was free a moment ago. For a
// cluster node, port+10000 (the cluster bus) must be free too.
func freePort(cluster bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			_ = l.Close()
			return port, nil
		}
		ok := false
		if port < maxClusterPort {
			bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			if err == nil {
				_ = bus.Close()
				ok = true
			}
		}
		_ = l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("no free port pair found")
}

// process is one run of a redis-server.
type process struct {
	cmd     *exec.Cmd
	out     *limitedBuffer
	done    chan struct{} // closed when the process has been waited for
	waitErr error         // valid after done is closed
}

// startProcess starts bin with args and reaps it in the background.
func startProcess(bin string, args []string) (*process, error) {
	out := &limitedBuffer{limit: outputLimit}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	// Forked children (e.g. for a replication RDB) inherit the output
	// pipe; do not let them hold up Wait forever.
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// output returns what the process wrote so far.
func (p *process) output() string { return p.out.String() }

// kill sends SIGKILL to the process and its forked children and waits for
// the process.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	killGroup(p.cmd.Process)
	<-p.done
}

// stop sends SIGTERM, then SIGKILL if the process does not exit within
// stopGrace, and waits for it.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	// On SIGTERM redis-server also stops its forked children.
	terminate(p.cmd.Process)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.kill()
	}
}

// limitedBuffer is a goroutine safe buffer that keeps the first limit
// bytes written to it.
type limitedBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
	extra int
}

// Write implements io.Writer.
func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - b.buf.Len()
	if room >= len(p) {
		b.buf.Write(p)
	} else {
		if room > 0 {
			b.buf.Write(p[:room])
		}
		b.extra += len(p) - max(room, 0)
	}
	return len(p), nil
}

// String returns the buffered output.
func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.extra > 0 {
		return fmt.Sprintf("%s\n[%d more bytes dropped]", b.buf.String(), b.extra)
	}
	return b.buf.String()
}
