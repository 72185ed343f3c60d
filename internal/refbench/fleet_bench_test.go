//go:build linux

package refbench_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

	fleetLoadTimeout = 2 * time.Minute // bounds one run of the load, whatever b.N
	fleetRPCTimeout  = time.Second
)

// BenchmarkFleet runs three sidecar processes, built from this tree,
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
	sidecars := make([]*refbench.Process, fleetSidecars)
	for i := range sidecars {
		sidecars[i] = refbench.StartSidecar(b, bin, args...)
	}
	clients := make([]rlsv3.RateLimitServiceClient, fleetClients)
	for i := range clients {
		conn, err := grpc.NewClient(sidecars[i%len(sidecars)].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
		trips += strings.Count(s.Output(), "circuit open")
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

func takeSnapshot(b *testing.B, servers []*redistest.Server, masters []*goredis.Client, sidecars []*refbench.Process) snapshot {
	b.Helper()
	var s snapshot
	for i, srv := range servers {
		cpu, err := refbench.ProcessCPU(srv.PID())
		if err != nil {
			b.Fatalf("redis-server %s: %v", srv.Addr, err)
		}
		calls, usec, err := refbench.ScriptStats(context.Background(), masters[i])
		if err != nil {
			b.Fatalf("redis-server %s: %v", srv.Addr, err)
		}
		s.redisCPU = append(s.redisCPU, cpu)
		s.scripts = append(s.scripts, calls)
		s.scriptUsec = append(s.scriptUsec, usec)
	}
	for _, sc := range sidecars {
		cpu, err := refbench.ProcessCPU(sc.PID())
		if err != nil {
			b.Fatalf("sidecar %s: %v%s", sc.GRPCAddr, err, logsOf(sidecars))
		}
		s.sidecarCPU += cpu
		m, err := sc.Metrics()
		if err != nil {
			b.Fatalf("sidecar %s: %v%s", sc.GRPCAddr, err, logsOf(sidecars))
		}
		s.fallbacks += m["ratelimit_sidecar_failure_mode_decisions_total"]
		s.storeErrors += m["ratelimit_sidecar_store_errors_total"]
		s.errorDecisions += m[`ratelimit_sidecar_decisions_total{result="error"}`]
	}
	self, err := refbench.SelfCPU()
	if err != nil {
		b.Fatal(err)
	}
	s.selfCPU = self
	return s
}

// buildSidecar builds the sidecar of this tree, or skips the benchmark
// if it cannot.
func buildSidecar(b *testing.B) string {
	b.Helper()
	bin, err := refbench.Build(b, repoRoot(b), "./cmd/ratelimit-sidecar")
	if err != nil {
		b.Skipf("cannot build the sidecar: %v", err)
	}
	return bin
}

// logsOf returns the sidecars' output, for a failure message.
func logsOf(sidecars []*refbench.Process) string {
	var sb strings.Builder
	for _, s := range sidecars {
		fmt.Fprintf(&sb, "\nsidecar %s output:\n%s", s.GRPCAddr, s.Output())
	}
	return sb.String()
}
