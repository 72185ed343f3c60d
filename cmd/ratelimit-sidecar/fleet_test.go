//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refbench"
)

// The fleet BenchmarkFleet runs, and the load it puts on it.
const (
	fleetSidecars = 3
	fleetClients  = 64
	fleetTenants  = 100
	fleetUsers    = 10000

	fleetBuildTimeout  = 5 * time.Minute
	fleetStartTimeout  = 10 * time.Second
	fleetStopTimeout   = 15 * time.Second // above the sidecar's --shutdown-timeout of 10s
	fleetLoadTimeout   = 2 * time.Minute  // bounds one run of the load, whatever b.N
	fleetRPCTimeout    = time.Second
	fleetPoll          = 20 * time.Millisecond
	fleetStartAttempts = 3
	fleetLogSize       = 64 << 10
)

// BenchmarkFleet runs three sidecar processes, built from this package,
// against a private Redis and drives them with 64 concurrent gRPC clients
// (one connection each, like Envoy workers) sending the mission's tiered
// request: [generic_key=global], [tenant=t<0..99>], [tenant=t, user=u<0..9999>].
// b.N is the number of decisions, over all clients.
//
// Sub-benchmarks: standalone/mission (one redis-server), cluster/mission
// (three masters) and cluster/leased (the global tier with lease: 100).
// The sidecars run with --failure-mode error, so a decision that Redis did
// not make fails and fails the benchmark.
//
// Besides ns/op it reports:
//   - decisions/s: b.N over the wall time of the load;
//   - decisions/s/master: decisions/s divided by the number of masters;
//   - redis-cpu-µs/decision: user+system CPU of every redis-server, from
//     /proc/<pid>/stat (10 ms ticks, so runs should burn well over a
//     second of Redis CPU to be precise to a few percent);
//   - busiest-master-cpu-µs/decision, and busiest-master-cap-decisions/s,
//     1e6 divided by it: the decisions/s of the whole fleet at which that
//     master would use one full core;
//   - scripts/decision and busiest-master-scripts/decision, from INFO
//     commandstats (EVAL and EVALSHA calls);
//   - sidecar-cpu-µs/decision (the three sidecars together) and
//     loadgen-cpu-µs/decision (this process: the 64 clients);
//   - errors: failed RPCs and unexpected answers (any is a failure).
//
// Everything shares the machine's cores, so CPU per decision is the
// figure to carry elsewhere, not decisions/s. The benchmark is skipped if
// the sidecar binary cannot be built.
func BenchmarkFleet(b *testing.B) {
	bin := buildSidecar(b)
	b.Run("standalone", func(b *testing.B) {
		srv := redistest.StartServer(b)
		r := fleetRedis{masters: []*redistest.Server{srv}, flags: []string{"--redis-url", "redis://" + srv.Addr}}
		b.Run("mission", func(b *testing.B) { runFleet(b, bin, r, "testdata/fleet/mission") })
	})
	b.Run("cluster", func(b *testing.B) {
		c := redistest.StartCluster(b)
		r := fleetRedis{masters: c.Nodes, flags: []string{"--redis-cluster-addrs", strings.Join(c.Addrs, ",")}}
		b.Run("mission", func(b *testing.B) { runFleet(b, bin, r, "testdata/fleet/mission") })
		b.Run("leased", func(b *testing.B) { runFleet(b, bin, r, "testdata/fleet/leased") })
	})
}

// fleetRedis is the Redis a fleet decides on.
type fleetRedis struct {
	masters []*redistest.Server
	flags   []string // the sidecar's flags naming it
}

// runFleet starts the sidecars on r with the rules in dir, sends b.N
// decisions and reports the figures BenchmarkFleet describes.
func runFleet(b *testing.B, bin string, r fleetRedis, dir string) {
	rules, err := filepath.Abs(dir)
	if err != nil {
		b.Fatal(err)
	}
	masters := make([]*goredis.Client, len(r.masters))
	for i, m := range r.masters {
		masters[i] = m.Client(b)
		// Every run starts from empty keys, whatever ran before.
		if err := masters[i].FlushAll(context.Background()).Err(); err != nil {
			b.Fatalf("FLUSHALL %s: %v", m.Addr, err)
		}
	}

	args := append([]string{
		"--config", rules,
		"--failure-mode", "error",
		"--redis-timeout", "100ms",
		"--log-level", "error",
	}, r.flags...)
	sidecars := make([]*fleetSidecar, fleetSidecars)
	for i := range sidecars {
		sidecars[i] = startFleetSidecar(b, bin, args)
	}
	clients := make([]rlsv3.RateLimitServiceClient, fleetClients)
	for i := range clients {
		conn, err := grpc.NewClient(sidecars[i%len(sidecars)].grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}

	ctx, cancel := context.WithTimeout(context.Background(), fleetLoadTimeout)
	defer cancel()
	// Warm up: connect every client and let every sidecar reach Redis.
	if res := drive(ctx, clients, fleetClients); res.errors > 0 {
		b.Fatalf("warm-up: %d of %d decisions failed; first: %v%s", res.errors, fleetClients, res.first, logsOf(sidecars))
	}

	before := takeSnapshot(b, r.masters, masters, sidecars)
	b.ResetTimer()
	start := time.Now()
	res := drive(ctx, clients, b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	after := takeSnapshot(b, r.masters, masters, sidecars)

	n := float64(b.N)
	perDecision := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	// The first pass of a benchmark, with b.N 1, only sizes the next:
	// its per-run breakdown is noise.
	logf := func(format string, args ...any) {
		if b.N > 1 {
			b.Logf("N=%d "+format, append([]any{b.N}, args...)...)
		}
	}
	var redisCPU time.Duration
	var scripts int64
	busiest := 0
	for i := range r.masters {
		redisCPU += after.redisCPU[i] - before.redisCPU[i]
		scripts += after.scripts[i] - before.scripts[i]
		if after.redisCPU[i]-before.redisCPU[i] > after.redisCPU[busiest]-before.redisCPU[busiest] {
			busiest = i
		}
		// Commandstats times scripts by the wall clock, so on a busy
		// machine it counts time Redis was preempted too.
		logf("master %d (%s): cpu %.1f µs/decision, %.3f scripts/decision, %.1f wall µs in scripts/decision",
			i, r.masters[i].Addr, perDecision(after.redisCPU[i]-before.redisCPU[i]),
			float64(after.scripts[i]-before.scripts[i])/n, float64(after.scriptUsec[i]-before.scriptUsec[i])/n)
	}
	busiestCPU := perDecision(after.redisCPU[busiest] - before.redisCPU[busiest])
	rate := n / elapsed.Seconds()
	b.ReportMetric(rate, "decisions/s")
	b.ReportMetric(rate/float64(len(r.masters)), "decisions/s/master")
	b.ReportMetric(perDecision(redisCPU), "redis-cpu-µs/decision")
	b.ReportMetric(busiestCPU, "busiest-master-cpu-µs/decision")
	if busiestCPU > 0 {
		b.ReportMetric(1e6/busiestCPU, "busiest-master-cap-decisions/s")
	}
	b.ReportMetric(float64(scripts)/n, "scripts/decision")
	b.ReportMetric(float64(after.scripts[busiest]-before.scripts[busiest])/n, "busiest-master-scripts/decision")
	b.ReportMetric(perDecision(after.sidecarCPU-before.sidecarCPU), "sidecar-cpu-µs/decision")
	b.ReportMetric(perDecision(after.selfCPU-before.selfCPU), "loadgen-cpu-µs/decision")
	b.ReportMetric(float64(res.errors), "errors")

	fallbacks := after.fallbacks - before.fallbacks
	storeErrors := after.storeErrors - before.storeErrors
	errorDecisions := after.errorDecisions - before.errorDecisions
	trips := 0
	for _, s := range sidecars {
		trips += strings.Count(s.log.String(), "circuit open")
	}
	logf("in %v: sidecars answered %.0f decisions with an error, made %.0f by a failure mode, counted %.0f store errors, logged %d breaker trips",
		elapsed.Round(time.Millisecond), errorDecisions, fallbacks, storeErrors, trips)
	if res.errors > 0 || fallbacks > 0 || trips > 0 {
		b.Errorf("%d of %d decisions failed %v, the first with %v; the sidecars decided %.0f by a failure mode and tripped their breaker %d times; want none of these%s",
			res.errors, b.N, res.codes, res.first, fallbacks, trips, logsOf(sidecars))
	}
}

// fleetResult is what drive saw.
type fleetResult struct {
	errors int64
	codes  map[string]int64 // errors by kind
	first  error
}

// drive sends n decisions over the clients, fleetClients at a time, and
// counts those that fail or are not plainly OK. It stops early when ctx
// ends, counting the rest as failed.
func drive(ctx context.Context, clients []rlsv3.RateLimitServiceClient, n int) fleetResult {
	var (
		next atomic.Int64
		mu   sync.Mutex
		res  = fleetResult{codes: map[string]int64{}}
		wg   sync.WaitGroup
	)
	fail := func(kind string, err error) {
		mu.Lock()
		defer mu.Unlock()
		res.errors++
		res.codes[kind]++
		if res.first == nil {
			res.first = err
		}
	}
	for i, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(n)))
			for next.Add(1) <= int64(n) {
				if ctx.Err() != nil {
					fail("load timeout", fmt.Errorf("load ran past %v", fleetLoadTimeout))
					continue
				}
				tenant := "t" + strconv.Itoa(rng.IntN(fleetTenants))
				user := "u" + strconv.Itoa(rng.IntN(fleetUsers))
				rctx, cancel := context.WithTimeout(ctx, fleetRPCTimeout)
				resp, err := c.ShouldRateLimit(rctx, missionRequest(tenant, user))
				cancel()
				switch {
				case err != nil:
					fail(status.Code(err).String(), err)
				case resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 3:
					fail("not OK", fmt.Errorf("response %v with %d statuses, want OK with 3", resp.OverallCode, len(resp.Statuses)))
				}
			}
		})
	}
	wg.Wait()
	return res
}

// missionRequest is the mission's tiered request.
func missionRequest(tenant, user string) *rlsv3.RateLimitRequest {
	entry := func(k, v string) *rlscommon.RateLimitDescriptor_Entry {
		return &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return &rlsv3.RateLimitRequest{
		Domain: "bench",
		Descriptors: []*rlscommon.RateLimitDescriptor{
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{entry("generic_key", "global")}},
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{entry("tenant", tenant)}},
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{entry("tenant", tenant), entry("user", user)}},
		},
	}
}

// snapshot is the counters runFleet compares before and after the load.
type snapshot struct {
	redisCPU   []time.Duration // per master
	scripts    []int64         // per master: EVAL and EVALSHA calls
	scriptUsec []int64         // per master: µs Redis spent in them
	sidecarCPU time.Duration   // all sidecars
	selfCPU    time.Duration   // this process
	// Summed over the sidecars' /metrics.
	fallbacks, storeErrors, errorDecisions float64
}

func takeSnapshot(b *testing.B, servers []*redistest.Server, masters []*goredis.Client, sidecars []*fleetSidecar) snapshot {
	b.Helper()
	var s snapshot
	for i, srv := range servers {
		cpu, err := procCPU(srv.PID())
		if err != nil {
			b.Fatalf("redis-server %s: %v", srv.Addr, err)
		}
		calls, usec, err := scriptStats(masters[i])
		if err != nil {
			b.Fatalf("redis-server %s: %v", srv.Addr, err)
		}
		s.redisCPU = append(s.redisCPU, cpu)
		s.scripts = append(s.scripts, calls)
		s.scriptUsec = append(s.scriptUsec, usec)
	}
	for _, sc := range sidecars {
		cpu, err := procCPU(sc.cmd.Process.Pid)
		if err != nil {
			b.Fatalf("sidecar %s: %v%s", sc.grpcAddr, err, logsOf(sidecars))
		}
		s.sidecarCPU += cpu
		m, err := sc.metrics()
		if err != nil {
			b.Fatalf("sidecar %s: %v%s", sc.grpcAddr, err, logsOf(sidecars))
		}
		s.fallbacks += m["ratelimit_sidecar_failure_mode_decisions_total"]
		s.storeErrors += m["ratelimit_sidecar_store_errors_total"]
		s.errorDecisions += m[`ratelimit_sidecar_decisions_total{result="error"}`]
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	s.selfCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s
}

// procCPU returns the user plus system CPU time process pid has used,
// from /proc (refbench.ProcessCPU).
var procCPU = refbench.ProcessCPU

// scriptStats returns how many EVAL and EVALSHA calls (plain and _RO) the
// server has run and the µs it spent in them, from INFO commandstats.
func scriptStats(c *goredis.Client) (calls, usec int64, err error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains([]string{"cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro"}, name) {
			continue
		}
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &calls
			case "usec":
				dst = &usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("INFO commandstats %q: %w", line, err)
			}
			*dst += n
		}
	}
	return calls, usec, nil
}

// buildSidecar builds this package's command into a temporary directory,
// or skips the benchmark if it cannot.
func buildSidecar(b *testing.B) string {
	b.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			b.Skipf("no go tool to build the sidecar: %v", err)
		}
	}
	bin := filepath.Join(b.TempDir(), "ratelimit-sidecar")
	ctx, cancel := context.WithTimeout(context.Background(), fleetBuildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		b.Skipf("cannot build the sidecar: %v\n%s", err, out)
	}
	return bin
}

// fleetSidecar is a running sidecar process.
type fleetSidecar struct {
	cmd                *exec.Cmd
	grpcAddr, httpAddr string
	log                *capped // its stdout and stderr
	done               chan struct{}
	http               *http.Client
}

// startFleetSidecar starts bin with args and free loopback ports, waits until
// it serves gRPC health and /readyz answers that Redis can decide, and
// stops it at cleanup.
func startFleetSidecar(b *testing.B, bin string, args []string) *fleetSidecar {
	b.Helper()
	var lastErr error
	for range fleetStartAttempts {
		s, err := tryStartFleetSidecar(bin, args)
		if err == nil {
			b.Cleanup(func() {
				if err := s.stop(); err != nil {
					b.Errorf("stop sidecar %s: %v\n%s", s.grpcAddr, err, s.log)
				}
			})
			return s
		}
		lastErr = err
		// Another process may have taken a port between our choosing it
		// and the sidecar's binding it.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	b.Fatalf("start sidecar: %v", lastErr)
	return nil
}

func tryStartFleetSidecar(bin string, args []string) (*fleetSidecar, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &fleetSidecar{
		grpcAddr: grpcAddr,
		httpAddr: httpAddr,
		log:      &capped{limit: fleetLogSize},
		done:     make(chan struct{}),
		// No keep-alives: no idle connections outlive the benchmark.
		http: &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	s.cmd = exec.Command(bin, append(args, "--grpc-addr", grpcAddr, "--http-addr", httpAddr)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Killed with this process too, should it die before cleanup.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.cmd.WaitDelay = time.Second
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		return nil, fmt.Errorf("%w; its output:\n%s", err, s.log)
	}
	return s, nil
}

// waitReady polls the sidecar until its gRPC health is SERVING and
// /readyz says "ok", the process exits, or fleetStartTimeout passes.
func (s *fleetSidecar) waitReady() error {
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), fleetStartTimeout)
	defer cancel()
	var lastErr error
	for {
		lastErr = s.ready(ctx, health)
		if lastErr == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("sidecar exited (%v) before it was ready: %v", s.cmd.ProcessState, lastErr)
		case <-ctx.Done():
			return fmt.Errorf("sidecar not ready within %v: %v", fleetStartTimeout, lastErr)
		case <-time.After(fleetPoll):
		}
	}
}

func (s *fleetSidecar) ready(ctx context.Context, health healthpb.HealthClient) error {
	rctx, cancel := context.WithTimeout(ctx, fleetRPCTimeout)
	defer cancel()
	h, err := health.Check(rctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil {
		return err
	}
	if h.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %v", h.Status)
	}
	body, err := s.get(rctx, "/readyz")
	if err != nil {
		return err
	}
	if body != "ok\n" {
		return fmt.Errorf("/readyz: %q", body)
	}
	return nil
}

// get returns the body of GET path, or an error unless it is 200 OK.
func (s *fleetSidecar) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := s.http.Do(req)
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

// metrics returns the sidecar's metrics: each series by its name and
// labels as exposed (`name{label="value"}`), and each name summed over its
// labels.
func (s *fleetSidecar) metrics() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetRPCTimeout)
	defer cancel()
	body, err := s.get(ctx, "/metrics")
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

// stop sends SIGTERM and waits for the sidecar to exit, killing it after
// fleetStopTimeout. It reports an exit other than a clean one after SIGTERM.
func (s *fleetSidecar) stop() error {
	select {
	case <-s.done:
		return fmt.Errorf("sidecar had already exited: %v", s.cmd.ProcessState)
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-s.done:
	case <-time.After(fleetStopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("no exit within %v of SIGTERM; killed", fleetStopTimeout)
	}
	if !s.cmd.ProcessState.Success() {
		return fmt.Errorf("exit after SIGTERM: %v", s.cmd.ProcessState)
	}
	return nil
}

// logsOf returns the sidecars' output, for a failure message.
func logsOf(sidecars []*fleetSidecar) string {
	var sb strings.Builder
	for _, s := range sidecars {
		fmt.Fprintf(&sb, "\nsidecar %s output:\n%s", s.grpcAddr, s.log)
	}
	return sb.String()
}

// freeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
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

// TestProcCPU checks procCPU against getrusage on this process, after
// burning some CPU.
func TestProcCPU(t *testing.T) {
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ruBefore := self()
	// Burn at least 200ms of CPU, bounded in wall time on a busy machine.
	deadline := time.Now().Add(10 * time.Second)
	x := uint64(1)
	for self()-ruBefore < 200*time.Millisecond && time.Now().Before(deadline) {
		for range 100000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	got, want := after-before, self()-ruBefore
	// /proc counts in 10ms ticks; allow two and some scheduling slack.
	if diff := got - want; diff < -30*time.Millisecond || diff > 30*time.Millisecond {
		t.Errorf("procCPU grew by %v while getrusage grew by %v (x=%d)", got, want, x)
	}
	if _, err := procCPU(0); err == nil {
		t.Error("procCPU(0) succeeded, want an error")
	}
}
