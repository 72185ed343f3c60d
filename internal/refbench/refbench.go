// Package refbench is test support: the one harness for benchmarks of
// server processes. It builds a binary, starts and stops a server
// process, waits until it is ready, reads its metrics and what it and
// Redis spent in CPU (process.go, cpu.go); BenchmarkFleet and
// BenchmarkRLQS use it.
//
// It also compares two RLS servers side by side on one Redis: this
// project's sidecar and envoyproxy/ratelimit (the reference), or two
// builds of the sidecar. It measures what a fleet pays per decision,
// Redis's CPU above all, since every sidecar of a fleet shares one Redis,
// then the server's own CPU and its latency, in rounds that alternate the
// servers (A B A B) so that a shared, noisy machine weighs on both alike.
// BenchmarkAgainstReference uses it, and its own test runs it with the
// sidecar in both slots.
package refbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Domain is the domain of Rules and of every request Load sends.
const Domain = "bench"

// Rules is the rule file both servers load: the tiers of a multi-tenant
// API, fixed windows, in the reference's format. Limits are far above
// what a run sends, so that every request is decided by Redis and
// admitted: a benchmark of the path that writes.
const Rules = `domain: bench
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// Workloads are the request shapes Load sends: one hot key; one of 10,000
// users; and the three tiers of a tenant's user (global, tenant, tenant
// and user: three descriptors, one of 100 tenants, one of 10,000 users).
var Workloads = []string{"hot", "users", "tiered"}

// Server is one slot of a comparison: the command that runs it on a
// Redis and a gRPC address, with Rules written to rulesDir.
type Server struct {
	Name    string
	Command func(redisAddr, grpcAddr, rulesDir string) (*exec.Cmd, error)
}

// Sidecar returns the slot of the sidecar binary bin, run as the
// reference is benchmarked: failing a request Redis cannot answer, with a
// store timeout of 100 ms, which a busy machine can reach (see
// TimingFailure). Further flags, args, follow those.
func Sidecar(name, bin string, args ...string) Server {
	return Server{Name: name, Command: func(redisAddr, grpcAddr, rulesDir string) (*exec.Cmd, error) {
		return exec.Command(bin, append([]string{"--config", rulesDir, "--grpc-addr", grpcAddr, "--http-addr", "127.0.0.1:0",
			"--redis-url", "redis://" + redisAddr, "--failure-mode", "error", "--redis-timeout", "100ms", "--log-level", "warn"}, args...)...), nil
	}}
}

// TimingFailure reports whether err, a request's error, is one that a slow
// machine alone can cause: the server's store call timed out or failed
// (Unavailable) or the request's own deadline passed (DeadlineExceeded).
// Any other code is a fault of the server or of the harness.
func TimingFailure(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Reference returns the slot of envoyproxy/ratelimit's binary bin, with
// its runtime directory under rulesDir's parent, statistics off, and its
// HTTP and debug ports on free loopback ports.
func Reference(bin string) Server {
	return Server{Name: "reference", Command: func(redisAddr, grpcAddr, rulesDir string) (*exec.Cmd, error) {
		root := filepath.Join(filepath.Dir(rulesDir), "runtime")
		if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(Rules), 0o644); err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(grpcAddr)
		httpPort, err := FreePort()
		if err != nil {
			return nil, err
		}
		debugPort, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit",
			"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true", "HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
			"GRPC_HOST="+host, "GRPC_PORT="+port, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
		return cmd, nil
	}}
}

// Result is what one server cost for one round of one workload.
type Result struct {
	Server, Workload string
	// Requests counts the requests decided; Errors those that failed, and
	// Failure is the first failure's error (nil when none failed).
	Requests, Errors int
	Failure          error
	Elapsed          time.Duration
	// ServerCPU is the server process's user and system time; RedisCPU
	// Redis's (INFO cpu), both over the round.
	ServerCPU, RedisCPU time.Duration
	P50, P99            time.Duration
}

// PerDecision returns d per request of r, in µs.
func (r Result) PerDecision(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1000 / float64(max(r.Requests, 1))
}

// Options shape a comparison.
type Options struct {
	Workloads   []string      // default Workloads
	Rounds      int           // A B rounds; default 3
	Concurrency int           // requests in flight; default 64
	Duration    time.Duration // of each round's load; default 5 s
	MaxRequests int           // per round, to bound it; default 2,000,000
	// KeepFailures returns a round with failed requests as a Result (its
	// Errors and Failure say how many and why) rather than ending the
	// comparison with an error: for a caller that judges failures itself,
	// as a test on a busy machine must.
	KeepFailures bool
}

func (o *Options) defaults() {
	if len(o.Workloads) == 0 {
		o.Workloads = Workloads
	}
	o.Rounds = cmp(o.Rounds, 3)
	o.Concurrency = cmp(o.Concurrency, 64)
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	o.MaxRequests = cmp(o.MaxRequests, 2_000_000)
}

func cmp(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Compare runs each workload on each server in turn, round after round,
// against the Redis at redisAddr, with the rules in rulesDir, and returns
// every round's result. Each server is started once, warmed up with a
// short load of each workload, and stopped at the end.
func Compare(ctx context.Context, redisAddr, rulesDir string, servers []Server, o Options) ([]Result, error) {
	o.defaults()
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rdb.Close()
	running := make([]*running, len(servers))
	for i, s := range servers {
		r, err := start(ctx, s, redisAddr, rulesDir)
		if err != nil {
			return nil, err
		}
		defer r.stop()
		running[i] = r
	}
	var out []Result
	for _, w := range o.Workloads {
		for _, r := range running {
			warm := o
			warm.Duration, warm.MaxRequests = time.Second, 20_000
			if _, err := r.round(ctx, rdb, w, warm); err != nil {
				return nil, err
			}
		}
		for range o.Rounds {
			for _, r := range running {
				res, err := r.round(ctx, rdb, w, o)
				if err != nil {
					return nil, err
				}
				out = append(out, res)
			}
		}
	}
	return out, nil
}

// running is a started server and a connection to it.
type running struct {
	name string
	proc *Process
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

func start(ctx context.Context, s Server, redisAddr, rulesDir string) (*running, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd, err := s.Command(redisAddr, addr, rulesDir)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	proc, err := Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	r := &running{name: s.Name, proc: proc}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.stop()
		return nil, err
	}
	r.conn, r.rls = conn, rlsv3.NewRateLimitServiceClient(conn)
	// Ready once it decides a request: the reference has no readiness
	// endpoint that says its rules are loaded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := r.rls.ShouldRateLimit(cctx, request("hot", 0))
		cancel()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.stop()
			return nil, fmt.Errorf("%s never answered on %s: %w; its output:\n%s", s.Name, addr, err, proc.Output())
		}
		time.Sleep(50 * time.Millisecond) // polling a process that is starting
	}
}

func (r *running) stop() {
	if r.conn != nil {
		r.conn.Close()
	}
	r.proc.Kill()
}

// round sends workload w at o.Concurrency for o.Duration (or
// o.MaxRequests) and measures what it cost.
func (r *running) round(ctx context.Context, rdb *goredis.Client, w string, o Options) (Result, error) {
	res := Result{Server: r.name, Workload: w}
	// Each round starts from an empty Redis and a warm-up of its own, as
	// ../shared's side-by-side.sh does: Redis expires what a round
	// wrote during the next one, and the reference writes several times
	// as many keys as the sidecar, so without it each server's Redis CPU
	// would carry the expiry of the server before it.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return res, err
	}
	warm := o
	warm.Duration, warm.MaxRequests = min(time.Second, o.Duration/5), o.MaxRequests/5
	if l := r.load(ctx, w, warm); l.errs > 0 && !o.KeepFailures {
		return res, fmt.Errorf("%s %s: %d requests of the warm-up failed, the first with: %w", r.name, w, l.errs, l.first)
	}
	cpu0, err := ProcessCPU(r.proc.PID())
	if err != nil {
		return res, err
	}
	redis0, err := RedisCPU(ctx, rdb)
	if err != nil {
		return res, err
	}
	l := r.load(ctx, w, o)
	lats, errs, first := l.lats, l.errs, l.first
	cpu1, err := ProcessCPU(r.proc.PID())
	if err != nil {
		return res, err
	}
	redis1, err := RedisCPU(ctx, rdb)
	if err != nil {
		return res, err
	}
	slices.Sort(lats)
	res.Requests, res.Errors, res.Failure, res.Elapsed = len(lats), errs, first, l.elapsed
	res.ServerCPU, res.RedisCPU = cpu1-cpu0, redis1-redis0
	if len(lats) > 0 {
		res.P50, res.P99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	if errs > 0 && !o.KeepFailures {
		return res, fmt.Errorf("%s %s: %d of %d requests failed, the first with: %w", r.name, w, errs, len(lats)+errs, first)
	}
	return res, nil
}

// loaded is what one round's load saw: the latency of each request that
// succeeded, the count of those that failed, the first failure's error,
// and the time the round took.
type loaded struct {
	lats    []time.Duration
	errs    int
	first   error
	elapsed time.Duration
}

// load runs the workers of one round. Each worker sends at least one
// request, however late it starts, so a round is never empty.
func (r *running) load(ctx context.Context, w string, o Options) loaded {
	var (
		mu    sync.Mutex
		lats  = make([]time.Duration, 0, 1<<16)
		errs  int
		first error
		sent  atomic.Int64
		wg    sync.WaitGroup
		start = time.Now()
		until = start.Add(o.Duration)
	)
	for g := range o.Concurrency {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1024)
			bad := 0
			var why error
			for n := g; (n == g || time.Now().Before(until)) && sent.Add(1) <= int64(o.MaxRequests); n += o.Concurrency {
				t := time.Now()
				if _, err := r.rls.ShouldRateLimit(ctx, request(w, n)); err != nil {
					if bad == 0 {
						why = err
					}
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lats, errs = append(lats, mine...), errs+bad
			if first == nil {
				first = why
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return loaded{lats: lats, errs: errs, first: first, elapsed: time.Since(start)}
}

// request returns the n-th request of workload w: which user and tenant
// follow from n by a fixed spread, so both servers see the same keys.
func request(w string, n int) *rlsv3.RateLimitRequest {
	entry := func(k, v string) *commonrl.RateLimitDescriptor_Entry {
		return &commonrl.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	desc := func(es ...*commonrl.RateLimitDescriptor_Entry) *commonrl.RateLimitDescriptor {
		return &commonrl.RateLimitDescriptor{Entries: es}
	}
	h := uint64(n) * 0x9e3779b97f4a7c15
	user, tenant := "u"+strconv.FormatUint(h%10_000, 10), "t"+strconv.FormatUint(h>>32%100, 10)
	req := &rlsv3.RateLimitRequest{Domain: Domain, HitsAddend: 1}
	switch w {
	case "hot":
		req.Descriptors = append(req.Descriptors, desc(entry("generic_key", "global")))
	case "users":
		req.Descriptors = append(req.Descriptors, desc(entry("user", user)))
	default:
		req.Descriptors = append(req.Descriptors, desc(entry("generic_key", "global")),
			desc(entry("tenant", tenant)), desc(entry("tenant", tenant), entry("user", user)))
	}
	return req
}

// Row is the medians over the rounds of one server on one workload, and
// their ratios to the first server's (Compare's servers[0]).
type Row struct {
	Server, Workload string
	// Per decision, in µs.
	RedisCPU, ServerCPU float64
	RPS                 float64
	P99                 time.Duration
	// RedisRatio and ServerRatio divide this server's figures by the
	// first server's on the same workload.
	RedisRatio, ServerRatio float64
}

// Summarize returns a Row per workload and server of results, in the
// order they first appear.
func Summarize(results []Result) []Row {
	type key struct{ server, workload string }
	var order []key
	by := map[key][]Result{}
	for _, r := range results {
		k := key{r.Server, r.Workload}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	median := func(rs []Result, f func(Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rows := make([]Row, 0, len(order))
	first := map[string]Row{}
	for _, k := range order {
		rs := by[k]
		row := Row{Server: k.server, Workload: k.workload,
			RedisCPU:  median(rs, func(r Result) float64 { return r.PerDecision(r.RedisCPU) }),
			ServerCPU: median(rs, func(r Result) float64 { return r.PerDecision(r.ServerCPU) }),
			RPS:       median(rs, func(r Result) float64 { return float64(r.Requests) / r.Elapsed.Seconds() }),
			P99:       time.Duration(median(rs, func(r Result) float64 { return float64(r.P99) })),
		}
		f, ok := first[k.workload]
		if !ok {
			f = row
			first[k.workload] = row
		}
		row.RedisRatio, row.ServerRatio = row.RedisCPU/f.RedisCPU, row.ServerCPU/f.ServerCPU
		rows = append(rows, row)
	}
	return rows
}

// Table renders rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| workload | server | decisions/s | Redis µs/decision | ÷ first | server µs/decision | ÷ first | p99 |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %v |\n", r.Workload, r.Server, r.RPS,
			r.RedisCPU, r.RedisRatio, r.ServerCPU, r.ServerRatio, r.P99.Round(10*time.Microsecond))
	}
	return b.String()
}
