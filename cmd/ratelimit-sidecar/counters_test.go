package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
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

// TestCounterResetWiring: the sidecar wires /debug/counters to its Redis
// store (with --redis-key-prefix), its deny cache and its leases, and
// --admin-counter-reset, the reset metric, its log and
// --log-rejections-values to the reset. internal/admin specifies what
// the endpoints answer.
func TestCounterResetWiring(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	logs := &logtest.Buffer{}
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--redis-key-prefix", "reset:",
		"--admin-addr", "127.0.0.1:0", "--admin-counter-reset"}})
	for range 5 {
		s.send(t, 1, "user", "alice") // the last from the deny cache
	}
	s.send(t, 1, "global", "x")

	v := s.counters(t, "user=alice", "global=x")
	user, global := v.Descriptors[0].Counters[0], v.Descriptors[1].Counters[0]
	if v.Store != "redis" || !strings.HasPrefix(user.Key, "reset:{") || user.DenyCache == nil || global.Lease == nil {
		t.Fatalf("before the reset: store %q, user=alice %+v, global=x %+v", v.Store, user, global)
	}
	code, body := s.admin(t, http.MethodPost, "/debug/counters/reset", "user=alice", "global=x")
	if code != http.StatusOK {
		t.Fatalf("POST /debug/counters/reset = %d %s", code, body)
	}
	var rv admin.ResetView
	if err := json.Unmarshal([]byte(body), &rv); err != nil {
		t.Fatal(err)
	}
	if ru, rg := rv.Descriptors[0].Counters[0], rv.Descriptors[1].Counters[0]; !ru.Deleted || !ru.DenyCacheDropped || !rg.Deleted || rg.LeaseDropped == nil {
		t.Errorf("reset: %s", body)
	}
	if metrics := s.getBody(t, "/metrics"); !strings.Contains(metrics, "ratelimit_sidecar_counter_resets_total 2") {
		t.Errorf("/metrics lacks counter_resets_total 2")
	}
	if lines := logs.Lines(t, "counters reset through the admin endpoint"); len(lines) != 1 {
		t.Fatalf("%d reset lines in the log, want 1:\n%s", len(lines), logs)
	}
	if strings.Contains(logs.String(), "alice") {
		t.Errorf("the log shows a descriptor value:\n%s", logs)
	}
}
