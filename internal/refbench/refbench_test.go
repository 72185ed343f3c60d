package refbench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refbench"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	refSrc = flag.String("refbench.src", os.Getenv("RLS_REFERENCE_SRC"),
		"BenchmarkAgainstReference: a checkout of github.com/envoyproxy/ratelimit to build the reference from (default $RLS_REFERENCE_SRC)")
	beforeSrc = flag.String("refbench.before", "",
		"BenchmarkAgainstReference: a checkout of this repository (e.g. a git worktree at the commit before a change) to add as a third server, \"before\"")
	rounds   = flag.Int("refbench.rounds", 3, "BenchmarkAgainstReference: A B rounds per workload")
	duration = flag.Duration("refbench.duration", 5*time.Second, "BenchmarkAgainstReference: each round's load")
	conc     = flag.Int("refbench.concurrency", 64, "BenchmarkAgainstReference: requests in flight")
	only     = flag.String("refbench.workloads", "", "BenchmarkAgainstReference: comma-separated workloads (default hot,users,tiered)")
)

// BenchmarkAgainstReference runs the comparison issue 29 asks for: the
// sidecar of this tree, envoyproxy/ratelimit built from -refbench.src,
// and optionally the sidecar built from -refbench.before, A B A B on one
// private redis-server, each workload at 64 requests in flight. It logs
// the table of medians (docs/performance.md shows one) and reports the
// sidecar's Redis and server CPU per decision as ratios to the
// reference's. Without a reference checkout it skips:
//
//	go test -run '^$' -bench AgainstReference -benchtime 1x ./internal/refbench \
//	    -args -refbench.src=$HOME/src/ratelimit
func BenchmarkAgainstReference(b *testing.B) {
	if *refSrc == "" {
		b.Skip("set -refbench.src (or RLS_REFERENCE_SRC) to a checkout of github.com/envoyproxy/ratelimit to compare against it")
	}
	ref := build(b, *refSrc, "./src/service_cmd")
	servers := []refbench.Server{refbench.Reference(ref), refbench.Sidecar("sidecar", build(b, repoRoot(b), "./cmd/ratelimit-sidecar"))}
	if *beforeSrc != "" {
		servers = append(servers, refbench.Sidecar("before", build(b, *beforeSrc, "./cmd/ratelimit-sidecar")))
	}
	o := refbench.Options{Rounds: *rounds, Duration: *duration, Concurrency: *conc}
	if *only != "" {
		o.Workloads = strings.Split(*only, ",")
	}
	var rows []refbench.Row
	for b.Loop() {
		results := compare(b, servers, o)
		rows = refbench.Summarize(results)
	}
	// Printed, not logged: a benchmark's log is cut at ten lines.
	fmt.Printf("\n%s\n", refbench.Table(rows))
	for _, r := range rows {
		if r.Server != "reference" {
			b.ReportMetric(r.RedisRatio, r.Server+"-"+r.Workload+"-redis/ref")
			b.ReportMetric(r.ServerRatio, r.Server+"-"+r.Workload+"-cpu/ref")
		}
	}
}

// TestCompareSelf runs the harness with the sidecar in both slots, a
// little of each workload, so that the benchmark above cannot rot
// unnoticed: every request of every workload is sent and decided or
// failed for a reason a slow machine explains, and both servers report
// Redis CPU. It asserts nothing that depends on timing: a request can
// time out under the harness's 100 ms store timeout on a busy machine
// (TimingFailure), and how much CPU a decision costs is the benchmark's
// to measure.
func TestCompareSelf(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar")
	}
	bin := build(t, repoRoot(t), "./cmd/ratelimit-sidecar")
	o := refbench.Options{Rounds: 1, Duration: 300 * time.Millisecond, Concurrency: 8, MaxRequests: 3000, KeepFailures: true}
	results := compare(t, []refbench.Server{refbench.Sidecar("a", bin), refbench.Sidecar("b", bin)}, o)
	if want := 2 * len(refbench.Workloads); len(results) != want {
		t.Fatalf("%d results, want %d (2 servers × %v)", len(results), want, refbench.Workloads)
	}
	for _, r := range results {
		if r.Requests+r.Errors < o.Concurrency {
			t.Errorf("%s %s: %d requests sent, want at least one per worker (%d)", r.Server, r.Workload, r.Requests+r.Errors, o.Concurrency)
		}
		if r.RedisCPU <= 0 || r.P99 < r.P50 {
			t.Errorf("%s %s: Redis CPU %v, p50 %v, p99 %v: want Redis work and ordered latencies", r.Server, r.Workload, r.RedisCPU, r.P50, r.P99)
		}
		switch {
		case r.Errors == 0:
		case refbench.TimingFailure(r.Failure):
			t.Logf("%s %s: %d of %d requests failed, as a busy machine can make them, the first with: %v", r.Server, r.Workload, r.Errors, r.Requests+r.Errors, r.Failure)
		default:
			t.Errorf("%s %s: %d of %d requests failed, the first with: %v", r.Server, r.Workload, r.Errors, r.Requests+r.Errors, r.Failure)
		}
	}
	rows := refbench.Summarize(results)
	t.Logf("\n%s", refbench.Table(rows))
	for _, r := range rows {
		if r.Server == "a" && r.RedisRatio != 1 {
			t.Errorf("%s: the first server's ratio to itself is %v", r.Workload, r.RedisRatio)
		}
	}
}

// TestCompareFailureSaysWhy runs a sidecar that refuses every request of
// the tiered workload (three descriptors, over its --max-descriptors 2):
// the comparison fails, and its error carries the request's own error.
func TestCompareFailureSaysWhy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar")
	}
	bin := build(t, repoRoot(t), "./cmd/ratelimit-sidecar")
	strict := refbench.Sidecar("strict", bin, "--max-descriptors", "2")
	srv := redistest.StartServer(t)
	rules := writeRules(t)
	o := refbench.Options{Workloads: []string{"tiered"}, Rounds: 1, Duration: 100 * time.Millisecond, Concurrency: 2, MaxRequests: 10}
	_, err := refbench.Compare(context.Background(), srv.Addr, rules, []refbench.Server{strict}, o)
	if err == nil || !strings.Contains(err.Error(), "code = InvalidArgument") || !strings.Contains(err.Error(), "descriptors") {
		t.Fatalf("Compare: %v; want the requests' error (InvalidArgument, naming descriptors)", err)
	}
	t.Log(err)

	o.KeepFailures = true
	results, err := refbench.Compare(context.Background(), srv.Addr, rules, []refbench.Server{strict}, o)
	if err != nil {
		t.Fatalf("Compare, keeping failures: %v", err)
	}
	for _, r := range results {
		if r.Errors == 0 || status.Code(r.Failure) != codes.InvalidArgument || refbench.TimingFailure(r.Failure) {
			t.Errorf("%s %s: %d errors, failure %v; want InvalidArgument, not a timing failure", r.Server, r.Workload, r.Errors, r.Failure)
		}
	}
}

// compare starts a private redis-server, writes the rules and runs the
// comparison.
func compare(t testing.TB, servers []refbench.Server, o refbench.Options) []refbench.Result {
	t.Helper()
	srv := redistest.StartServer(t)
	rules := writeRules(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	results, err := refbench.Compare(ctx, srv.Addr, rules, servers, o)
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// writeRules writes refbench.Rules into a new directory and returns it.
func writeRules(t testing.TB) string {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules")
	if err := os.MkdirAll(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "bench.yaml"), []byte(refbench.Rules), 0o644); err != nil {
		t.Fatal(err)
	}
	return rules
}

// build builds the command pkg of the module in dir.
func build(t testing.TB, dir, pkg string) string {
	t.Helper()
	bin, err := refbench.Build(t, dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// repoRoot is this repository's root: two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}
