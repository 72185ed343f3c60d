package refbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The process harness: build a command, start it, wait until it is
// ready, read its metrics and its CPU, and stop it.
const (
	buildTimeout  = 5 * time.Minute
	readyTimeout  = 10 * time.Second
	stopTimeout   = 15 * time.Second // above the sidecar's --shutdown-timeout of 10s
	callTimeout   = time.Second
	readyPoll     = 20 * time.Millisecond
	startAttempts = 3
	outputSize    = 64 << 10
)

// Build builds the command pkg (say "./cmd/ratelimit-sidecar") of the
// module in dir into a temporary directory of tb and returns the
// binary's path.
func Build(tb testing.TB, dir, pkg string) (string, error) {
	tb.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			return "", fmt.Errorf("no go tool: %w", err)
		}
	}
	bin := filepath.Join(tb.TempDir(), filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, out)
	}
	return bin, nil
}

// Process is a server process started by Start. Its methods are safe
// for concurrent use.
type Process struct {
	Cmd *exec.Cmd
	// GRPCAddr and HTTPAddr are its listeners', when StartSidecar
	// started it.
	GRPCAddr, HTTPAddr string
	out                *capped // its stdout and stderr
	done               chan struct{}
	http               *http.Client
}

// Start starts cmd, its output kept (the first 64 KiB) for Output, and
// killed should this process die first.
func Start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{
		Cmd:  cmd,
		out:  &capped{limit: outputSize},
		done: make(chan struct{}),
		// No keep-alives: no idle connections outlive the process.
		http: &http.Client{Timeout: callTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	setDeathSignal(cmd)
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartSidecar starts the sidecar binary bin with args and free loopback
// ports, waits until it serves gRPC health and /readyz answers that its
// store can decide, and stops it at cleanup (failing tb unless it exits
// cleanly after SIGTERM).
func StartSidecar(tb testing.TB, bin string, args ...string) *Process {
	tb.Helper()
	var lastErr error
	for range startAttempts {
		p, err := tryStartSidecar(bin, args)
		if err == nil {
			tb.Cleanup(func() {
				if err := p.Stop(); err != nil {
					tb.Errorf("stop sidecar %s: %v\n%s", p.GRPCAddr, err, p.Output())
				}
			})
			return p
		}
		lastErr = err
		// Another process may have taken a port between our choosing it
		// and the sidecar's binding it.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	tb.Fatalf("start sidecar: %v", lastErr)
	return nil
}

func tryStartSidecar(bin string, args []string) (*Process, error) {
	grpcAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := Start(exec.Command(bin, append(args, "--grpc-addr", grpcAddr, "--http-addr", httpAddr)...))
	if err != nil {
		return nil, err
	}
	p.GRPCAddr, p.HTTPAddr = grpcAddr, httpAddr
	if err := p.waitReady(); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%w; its output:\n%s", err, p.Output())
	}
	return p, nil
}

// waitReady polls the sidecar until its gRPC health is SERVING and
// /readyz says "ok", the process exits, or readyTimeout passes.
func (p *Process) waitReady() error {
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		lastErr := p.ready(ctx, health)
		if lastErr == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("sidecar exited (%v) before it was ready: %v", p.Cmd.ProcessState, lastErr)
		case <-ctx.Done():
			return fmt.Errorf("sidecar not ready within %v: %v", readyTimeout, lastErr)
		case <-time.After(readyPoll):
		}
	}
}

func (p *Process) ready(ctx context.Context, health healthpb.HealthClient) error {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	h, err := health.Check(rctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil {
		return err
	}
	if h.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %v", h.Status)
	}
	body, err := p.get(rctx, "/readyz")
	if err != nil {
		return err
	}
	if body != "ok\n" {
		return fmt.Errorf("/readyz: %q", body)
	}
	return nil
}

// get returns the body of GET path, or an error unless it is 200 OK.
func (p *Process) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTPAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %q", path, resp.Status, body)
	}
	return string(body), nil
}

// Metrics returns the sidecar's metrics: each series by its name and
// labels as exposed (`name{label="value"}`), and each name summed over its
// labels.
func (p *Process) Metrics() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	body, err := p.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		series := name
		if i := strings.IndexByte(name, '{'); i >= 0 {
			// Labels may hold spaces: the value follows the closing brace.
			j := strings.LastIndexByte(line, '}')
			series, name, value = line[:j+1], name[:i], strings.TrimSpace(line[j+1:])
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics line %q: %w", line, err)
		}
		m[name] += v
		if series != name {
			m[series] = v
		}
	}
	return m, sc.Err()
}

// PID returns the process's id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Output returns what the process wrote to its stdout and stderr (the
// first 64 KiB).
func (p *Process) Output() string { return p.out.String() }

// Stop sends SIGTERM and waits for the process to exit, killing it after
// stopTimeout. It reports an exit other than a clean one after SIGTERM.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("process had already exited: %v", p.Cmd.ProcessState)
	default:
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.Kill()
		return fmt.Errorf("no exit within %v of SIGTERM; killed", stopTimeout)
	}
	if !p.Cmd.ProcessState.Success() {
		return fmt.Errorf("exit after SIGTERM: %v", p.Cmd.ProcessState)
	}
	return nil
}

// Kill kills the process and waits for it to exit.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

// capped is a goroutine-safe buffer that keeps the first limit bytes
// written to it, so a chatty process cannot fill memory.
type capped struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

// Write implements io.Writer.
func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// String returns what was kept.
func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
