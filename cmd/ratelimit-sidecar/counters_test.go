package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
)

// counterRules returns the rules internal/admin's counter tests use: a
// limit of each algorithm, and a leased one.
func counterRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../internal/admin/testdata/counters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// send sends one request of one descriptor of entries k=v.
func (s *sidecar) send(t *testing.T, hits uint32, kv ...string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := s.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*rlscommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

// counters GETs /debug/counters on the admin address for the descriptors.
func (s *sidecar) counters(t *testing.T, descs ...string) admin.CountersView {
	t.Helper()
	code, body := s.admin(t, http.MethodGet, "/debug/counters", descs...)
	if code != http.StatusOK {
		t.Fatalf("GET /debug/counters = %d %s", code, body)
	}
	var v admin.CountersView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET /debug/counters: %v\n%s", err, body)
	}
	return v
}

// admin calls path on the admin address with domain=edge and the
// descriptors, in the URL for GET and in a form body for POST.
func (s *sidecar) admin(t *testing.T, method, path string, descs ...string) (int, string) {
	t.Helper()
	q := url.Values{"domain": {"edge"}, "descriptor": descs}
	var r *http.Response
	var err error
	if method == http.MethodGet {
		r, err = http.Get("http://" + s.adminAddr + path + "?" + q.Encode())
	} else {
		r, err = http.PostForm("http://"+s.adminAddr+path, q)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestCounterReset resets a counter on Redis that this sidecar's deny
// cache rejects, and one it holds a lease of: both are read first, then
// cleared with the counter, the next request is admitted, and the reset is
// logged and counted. The endpoints are on --admin-addr only.
func TestCounterReset(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	logs := &logtest.Buffer{}
	s := startSidecarLog(t, logs, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--redis-key-prefix", "reset:",
		"--admin-addr", "127.0.0.1:0", "--admin-counter-reset")
	if code, _ := s.get(t, "/debug/counters?domain=edge&descriptor=user=alice"); code != http.StatusNotFound {
		t.Errorf("GET /debug/counters on --http-addr = %d, want 404 with --admin-addr set", code)
	}
	for range 3 {
		s.send(t, 1, "user", "alice")
	}
	// The first rejection comes from Redis, the second from the cache.
	s.send(t, 1, "user", "alice")
	s.send(t, 1, "global", "x")
	s.send(t, 1, "global", "x") // from the lease

	v := s.counters(t, "user=alice", "global=x")
	user := v.Descriptors[0].Counters[0]
	if v.Store != "redis" || !strings.HasPrefix(user.Key, "reset:{") || *user.State.Hits != 3 || !*user.Over || user.DenyCache == nil || user.DenyCache.Probe != 1 {
		t.Fatalf("user=alice before the reset: %+v, state %+v", user, user.State)
	}
	global := v.Descriptors[1].Counters[0]
	// The first request took 1 and a lease of 10, the second 1 of the
	// lease.
	if *global.State.Hits != 11 || global.Lease == nil || global.Lease.Held != 9 {
		t.Fatalf("global=x before the reset: %+v, state %+v, lease %+v", global, global.State, global.Lease)
	}

	code, body := s.admin(t, http.MethodPost, "/debug/counters/reset", "user=alice", "global=x")
	if code != http.StatusOK {
		t.Fatalf("POST /debug/counters/reset = %d %s", code, body)
	}
	var rv admin.ResetView
	if err := json.Unmarshal([]byte(body), &rv); err != nil {
		t.Fatal(err)
	}
	ru, rg := rv.Descriptors[0].Counters[0], rv.Descriptors[1].Counters[0]
	if !ru.Deleted || !ru.DenyCacheDropped || !rg.Deleted || rg.LeaseDropped == nil || *rg.LeaseDropped != 9 {
		t.Errorf("reset: %s", body)
	}

	v = s.counters(t, "user=alice", "global=x")
	user, global = v.Descriptors[0].Counters[0], v.Descriptors[1].Counters[0]
	if !user.State.Fresh || user.DenyCache != nil || !global.State.Fresh || global.Lease != nil {
		t.Errorf("after the reset: user %+v (state %+v), global %+v (state %+v)", user, user.State, global, global.State)
	}
	if got := s.send(t, 1, "user", "alice"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("after the reset: %v, want OK", got)
	}

	metrics := s.getBody(t, "/metrics")
	if !strings.Contains(metrics, "ratelimit_sidecar_counter_resets_total 2") {
		t.Errorf("/metrics lacks counter_resets_total 2")
	}
	lines := logs.Lines(t, "counters reset through the admin endpoint")
	if len(lines) != 1 {
		t.Fatalf("%d reset lines in the log, want 1:\n%s", len(lines), logs)
	}
	l := lines[0]
	if l["level"] != "warn" || l["domain"] != "edge" || l["counters"] != 2.0 || !strings.HasPrefix(l["remote_addr"].(string), "127.0.0.1:") {
		t.Errorf("reset log line: %v", l)
	}
	if strings.Contains(logs.String(), "alice") {
		t.Errorf("the log shows a descriptor value:\n%s", logs)
	}
}

// TestRejectionLogInSidecar: with --log-rejections info, the sidecar logs
// its rejections, within --log-rejections-rate, and counts the rest.
func TestRejectionLogInSidecar(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	logs := &logtest.Buffer{}
	// A Redis call past the default 15 ms on a busy machine would be
	// admitted by the failure mode, and not counted as a rejection.
	s := startSidecarLog(t, logs, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--redis-timeout", "5s", "--failure-mode", "error",
		"--log-rejections", "info", "--log-rejections-rate", "2", "--log-rejections-values", "plain")
	for range 3 {
		s.send(t, 1, "user", "alice")
	}
	start := time.Now()
	for range 50 {
		s.send(t, 1, "user", "alice")
	}
	// A burst of 2, and one more per half second the requests took.
	most := 2 + int(time.Since(start)/(500*time.Millisecond)) + 1
	lines := logs.Lines(t, rejectlog.Message)
	if len(lines) < 2 || len(lines) > most {
		t.Fatalf("%d rejection lines for 50 rejections, want 2 to %d:\n%s", len(lines), most, logs)
	}
	if lines[0]["decided_by"] != "redis" || lines[1]["decided_by"] != "deny_cache" {
		t.Errorf("decided_by: %v then %v, want redis then deny_cache", lines[0]["decided_by"], lines[1]["decided_by"])
	}
	if d := lines[0]["descriptors"].([]any); len(d) != 1 || d[0] != "user=alice" {
		t.Errorf("descriptors: %v", d)
	}
	metrics := s.getBody(t, "/metrics")
	want := fmt.Sprintf("ratelimit_sidecar_rejection_logs_suppressed_total %d\n", 50-len(lines))
	if !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestCountersCluster reads and resets a counter through a sidecar on a
// Redis Cluster.
func TestCountersCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	// Failure mode error and a long timeout: on a busy machine a slow
	// Cluster must fail the test's requests loudly, not send them to the
	// local fallback, whose counts /debug/counters does not read.
	s := startSidecar(t, "--config", dir, "--redis-cluster-addrs", strings.Join(c.Addrs, ","), "--admin-counter-reset",
		"--failure-mode", "error", "--redis-timeout", "2s")
	s.send(t, 4, "tenant", "acme")
	s.send(t, 2, "path", "/x")
	v := s.counters(t, "tenant=acme", "path=/x")
	if v.Store != "redis" {
		t.Errorf("store = %q, want redis", v.Store)
	}
	tenant, path := v.Descriptors[0].Counters, v.Descriptors[1].Counters[0]
	if tenant[0].State.Hits == nil || tenant[1].State.Tokens == nil || tenant[2].State.Backlog == nil || path.State.Hits == nil {
		t.Fatalf("counters without state: %+v %+v %+v %+v", tenant[0].State, tenant[1].State, tenant[2].State, path.State)
	}
	if *tenant[0].State.Hits != 4 || *tenant[1].State.Tokens != 6 || *tenant[2].State.Backlog != 4 || *path.State.Hits != 2 {
		t.Fatalf("counters: %+v %+v %+v %+v", tenant[0].State, tenant[1].State, tenant[2].State, path.State)
	}
	if code, body := s.admin(t, http.MethodPost, "/debug/counters/reset", "tenant=acme", "path=/x"); code != http.StatusOK {
		t.Fatalf("reset = %d %s", code, body)
	}
	v = s.counters(t, "tenant=acme", "path=/x")
	for _, d := range v.Descriptors {
		for _, c := range d.Counters {
			if !c.State.Fresh {
				t.Errorf("%s after the reset: %+v", c.Limit, c.State)
			}
		}
	}
}

// TestCountersStoreDown: with Redis down, a counter shows the error, and
// a reset fails with 503 and keeps what the deny cache knows.
func TestCountersStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	s := startSidecar(t, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--admin-counter-reset")
	for range 5 {
		s.send(t, 1, "user", "alice")
	}
	srv.Kill()
	c := s.counters(t, "user=alice").Descriptors[0].Counters[0]
	if c.Error == "" || c.State != nil || c.DenyCache == nil {
		t.Errorf("with Redis down: %+v; want an error, no state, and the deny cache entry", c)
	}
	code, body := s.admin(t, http.MethodPost, "/debug/counters/reset", "user=alice")
	var rv admin.ResetView
	if err := json.Unmarshal([]byte(body), &rv); err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if r := rv.Descriptors[0].Counters[0]; code != http.StatusServiceUnavailable || r.Error == "" || r.Deleted || r.DenyCacheDropped {
		t.Errorf("reset with Redis down = %d %s; want 503 with the error", code, body)
	}
	if c := s.counters(t, "user=alice").Descriptors[0].Counters[0]; c.DenyCache == nil {
		t.Error("a failed reset dropped the deny cache entry")
	}
}
