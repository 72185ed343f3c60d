package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// The tests in this file replay the calls Envoy makes for a usage-based
// limit (Envoy Gateway's rate-limit cost, Envoy AI Gateway's token
// budgets): at request time a ShouldRateLimit whose descriptors carry
// their own hits_addend of 0 (check only), and at stream end one more
// with the same descriptors, each carrying what the response used. The
// stream-end charge must count even when it takes a limit past zero, so
// that the next check is denied.

// usageRules holds one usage budget per algorithm (1000 an hour: hours,
// so that a test hardly ever straddles a window), the token counters of
// AI Gateway's example, a quota_mode budget as AI Gateway's QuotaPolicy
// renders it, and a tenant and a model budget charged together.
const usageRules = `
domain: llm
descriptors:
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 1000}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 1000}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 1000}
  - key: leaky_bucket
    rate_limit: {algorithm: leaky_bucket, unit: hour, requests_per_unit: 1000}
  - key: llm_input_token
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: llm_output_token
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: llm_total_token
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: quota_tokens
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: model
    rate_limit: {unit: day, requests_per_unit: 1000000}
`

// usageDesc is one descriptor of a replayed call: key=value, and its own
// hits_addend unless own is false.
type usageDesc struct {
	key, value string
	hits       uint64
	own        bool
	neg        bool // is_negative_hits: a refund
}

// charge is a descriptor carrying its own hits_addend n, as Envoy sends
// both the request-time check (n = 0) and the stream-end charge.
func charge(key, value string, n uint64) usageDesc {
	return usageDesc{key: key, value: value, hits: n, own: true}
}

// call sends one ShouldRateLimit of domain llm with descs.
func (s *sidecar) call(t *testing.T, descs ...usageDesc) *rlsv3.RateLimitResponse {
	t.Helper()
	req := &rlsv3.RateLimitRequest{Domain: "llm"}
	for _, d := range descs {
		rd := &rlscommon.RateLimitDescriptor{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: d.key, Value: d.value}}}
		if d.own {
			rd.HitsAddend = wrapperspb.UInt64(d.hits)
		}
		rd.IsNegativeHits = d.neg
		req.Descriptors = append(req.Descriptors, rd)
	}
	resp, err := s.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", descs, err)
	}
	return resp
}

// statuses returns each status's code and what remains, as "OK/400", or
// "OK/?" for a status that reports no limit: the deny cache, answering a
// request that another descriptor's cached verdict rejects, does not
// know the state of the others (limits.Outcome.Unknown).
func statuses(resp *rlsv3.RateLimitResponse) string {
	var parts []string
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil {
			parts = append(parts, st.GetCode().String()+"/?")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%d", st.GetCode(), st.GetLimitRemaining()))
	}
	return resp.GetOverallCode().String() + " " + strings.Join(parts, " ")
}

// sameStatuses reports whether got, as statuses writes it, is want, a
// status of "CODE/?" in got matching any of that code in want.
func sameStatuses(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		code, rest, _ := strings.Cut(g[i], "/")
		if g[i] != w[i] && !(rest == "?" && strings.HasPrefix(w[i], code+"/")) {
			return false
		}
	}
	return true
}

// replayStep is one call and the answer it must get, as statuses writes it.
type replayStep struct {
	give []usageDesc
	want string
}

// replay sends the steps in order and checks each answer.
func (s *sidecar) replay(t *testing.T, steps []replayStep) {
	t.Helper()
	for i, st := range steps {
		if got := statuses(s.call(t, st.give...)); !sameStatuses(got, st.want) {
			t.Errorf("step %d %v: got %q, want %q", i, st.give, got, st.want)
		}
	}
}

// usageCases are the cases of the issue, each on its own counters (the
// value names the run, so that sidecars sharing a Redis do not share
// them).
func usageCases(run string) map[string][]replayStep {
	cases := map[string][]replayStep{}
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket"} {
		v := run + "-a"
		// 1000 tokens: check, charge 600, check (400 left), charge 600,
		// which goes over and counts, so every later check is denied.
		cases[alg+"/over_by_a_charge"] = []replayStep{
			{[]usageDesc{charge(alg, v, 0)}, "OK OK/1000"},
			{[]usageDesc{charge(alg, v, 600)}, "OK OK/400"},
			{[]usageDesc{charge(alg, v, 0)}, "OK OK/400"},
			{[]usageDesc{charge(alg, v, 600)}, "OVER_LIMIT OVER_LIMIT/0"},
			{[]usageDesc{charge(alg, v, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
			{[]usageDesc{charge(alg, v, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
		}
		// One response of 5000 tokens on a fresh budget of 1000.
		w := run + "-b"
		cases[alg+"/one_large_charge"] = []replayStep{
			{[]usageDesc{charge(alg, w, 5000)}, "OVER_LIMIT OVER_LIMIT/0"},
			{[]usageDesc{charge(alg, w, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
		}
	}
	// AI Gateway's token example: input 10/h, output 100/h, total
	// 1000/h, charged in one stream-end call; only output goes over, and
	// each counter counts its own charge.
	u := run + "-user"
	tokens := func(in, out, total uint64) []usageDesc {
		return []usageDesc{charge("llm_input_token", u, in), charge("llm_output_token", u, out), charge("llm_total_token", u, total)}
	}
	cases["ai_gateway_tokens"] = []replayStep{
		{tokens(0, 0, 0), "OK OK/10 OK/100 OK/1000"},
		{tokens(5, 150, 155), "OVER_LIMIT OK/5 OVER_LIMIT/0 OK/845"},
		{tokens(0, 0, 0), "OVER_LIMIT OK/5 OVER_LIMIT/0 OK/845"},
	}
	// AI Gateway's QuotaPolicy: 10 tokens an hour on a quota_mode
	// descriptor; a request, an answer of 20 tokens, and the next
	// request must be denied.
	q := run + "-q"
	cases["quota_policy"] = []replayStep{
		{[]usageDesc{charge("quota_tokens", q, 0)}, "OK OK/10"},
		{[]usageDesc{charge("quota_tokens", q, 20)}, "OVER_LIMIT OVER_LIMIT/0"},
		{[]usageDesc{charge("quota_tokens", q, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
	}
	// A tenant (1000/h) and a model (1,000,000/day) in one stream-end
	// report of 500 tokens, the tenant over: both count.
	tm := func(n uint64) []usageDesc {
		return []usageDesc{charge("tenant", run+"-t", n), charge("model", run+"-m", n)}
	}
	cases["tenant_and_model"] = []replayStep{
		{tm(800), "OK OK/200 OK/999200"},
		{tm(500), "OVER_LIMIT OVER_LIMIT/0 OK/998700"},
		{tm(0), "OVER_LIMIT OVER_LIMIT/0 OK/998700"},
	}
	// An ordinary request (no hits_addend of its own) keeps
	// all-or-nothing: rejected, it consumes nothing anywhere.
	o := run + "-o"
	cases["ordinary_all_or_nothing"] = []replayStep{
		{[]usageDesc{charge("llm_input_token", o, 10)}, "OK OK/0"},
		{[]usageDesc{{key: "llm_total_token", value: o}, {key: "llm_input_token", value: o}}, "OVER_LIMIT OK/1000 OVER_LIMIT/0"},
		{[]usageDesc{charge("llm_total_token", o, 0)}, "OK OK/1000"},
	}
	return cases
}

// runUsageCases runs every case of usageCases on s.
func runUsageCases(t *testing.T, s *sidecar) {
	t.Helper()
	for name, steps := range usageCases(strings.ReplaceAll(t.Name(), "/", "-")) {
		t.Run(name, func(t *testing.T) { s.replay(t, steps) })
	}
}

func usageRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), usageRules)
	return dir
}

// TestUsageChargesMemory replays Envoy's calls on the embedded store.
func TestUsageChargesMemory(t *testing.T) {
	s := startSidecar(t, "--config", usageRulesDir(t))
	runUsageCases(t, s)
}

// TestUsageChargesRedis replays Envoy's calls on a standalone Redis, with
// the deny cache on (its default).
func TestUsageChargesRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	s := startSidecar(t, "--config", usageRulesDir(t), "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s")
	runUsageCases(t, s)
}

// TestUsageChargesCluster replays Envoy's calls on a 3-master Cluster:
// a call's descriptors have different first entries, so their counters
// lie in different slots, and the test checks that they landed on more
// than one master.
func TestUsageChargesCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	// A timeout a busy machine does not reach: failure mode error makes a
	// slow round trip a failed case.
	s := startSidecar(t, "--config", usageRulesDir(t), "--redis-cluster-addrs", strings.Join(c.Addrs, ","), "--failure-mode", "error", "--redis-timeout", "2s")
	runUsageCases(t, s)
	holding := 0
	for _, n := range c.Nodes {
		if k, err := n.Client(t).DBSize(context.Background()).Result(); err != nil {
			t.Fatal(err)
		} else if k > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Errorf("counters on %d masters, want them spread over 2 or more", holding)
	}
}

// usageRulesLeased is usageRules with a lease of 50 on every leasable
// limit of 1000.
func usageRulesLeased() string {
	var out []string
	for _, line := range strings.Split(usageRules, "\n") {
		if strings.Contains(line, "requests_per_unit: 1000}") && !strings.Contains(line, "sliding_log") {
			line = strings.Replace(line, "requests_per_unit: 1000}", "requests_per_unit: 1000, lease: 50}", 1)
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// TestUsageChargesLeased replays Envoy's calls on Redis with the budgets
// leased: a charge never comes out of a lease, and one that takes a
// budget into debt ends the lease.
func TestUsageChargesLeased(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), usageRulesLeased())
	s := startSidecar(t, "--config", dir, "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s")
	runUsageCases(t, s)
}

// TestUsageChargesFailureModes: while Redis cannot decide, failure mode
// local counts every charge on the sidecar's memory store, so the cases
// hold there too; the other modes answer as they answer any request, and
// the charge is counted nowhere, which rule_usage_lost_total says.
func TestUsageChargesFailureModes(t *testing.T) {
	down := redistest.StartServer(t)
	down.Kill()
	args := func(mode string) []string {
		return []string{"--config", usageRulesDir(t), "--redis-url", "redis://" + down.Addr, "--failure-mode", mode, "--redis-timeout", "50ms"}
	}
	t.Run("local", func(t *testing.T) {
		runUsageCases(t, startSidecar(t, args("local")...))
	})
	for _, tt := range []struct {
		mode string
		want string
	}{
		{"open", "OK OK/?"},
		{"closed", "OVER_LIMIT OVER_LIMIT/0"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			s := startSidecar(t, args(tt.mode)...)
			if got := statuses(s.call(t, charge("tenant", "t", 500))); got != tt.want {
				t.Errorf("charge in mode %s: %q, want %q", tt.mode, got, tt.want)
			}
			_, body := s.get(t, "/metrics")
			if want := `ratelimit_sidecar_rule_usage_lost_total{algorithm="fixed_window",domain="llm",rule="tenant",window="1h0m0s"} 500`; !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		s := startSidecar(t, args("error")...)
		req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t"}}, HitsAddend: wrapperspb.UInt64(500),
		}}}
		if _, err := s.rls.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
			t.Errorf("charge in mode error: %v, want Unavailable", err)
		}
	})
}

// TestUsageChargesObserved: metrics count a usage charge as usage, not as
// rejected hits; the rejection log says a charge went over; and
// /debug/counters shows the debt.
func TestUsageChargesObserved(t *testing.T) {
	var log logtest.Buffer
	s := startSidecarLog(t, &log, "--config", usageRulesDir(t), "--log-rejections", "info")
	s.replay(t, usageCases("obs")["tenant_and_model"])
	_, body := s.get(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_rule_usage_total{algorithm="fixed_window",domain="llm",rule="tenant",window="1h0m0s"} 1300`,
		`ratelimit_sidecar_rule_usage_over_total{algorithm="fixed_window",domain="llm",rule="tenant",window="1h0m0s"} 500`,
		`ratelimit_sidecar_rule_usage_total{algorithm="fixed_window",domain="llm",rule="model",window="24h0m0s"} 1300`,
		`ratelimit_sidecar_rule_over_limit_total{algorithm="fixed_window",domain="llm",rule="tenant",window="1h0m0s"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(log.String(), `"msg":"usage charge over limit"`) || !strings.Contains(log.String(), `"usage_charge":500`) {
		t.Errorf("rejection log has no line for the charge that went over:\n%s", log.String())
	}
	// The check-only call after it is a rejection of a request.
	if !strings.Contains(log.String(), `"msg":"request over limit"`) {
		t.Errorf("rejection log has no line for the check that was denied:\n%s", log.String())
	}
	q := url.Values{"domain": {"llm"}, "descriptor": {"tenant=obs-t"}}
	r, err := http.Get("http://" + s.adminAddr + "/debug/counters?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var v admin.CountersView
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if c := v.Descriptors[0].Counters[0]; c.State == nil || c.State.Debt == nil || *c.State.Debt != 300 {
		t.Errorf("/debug/counters for tenant=obs-t: %+v, want a debt of 300", c.State)
	}
}

// TestUsageChargesOverXDS: rules that arrive over xDS, as Envoy Gateway
// renders a BackendTrafficPolicy rule with a cost (a RateLimitConfig has
// no charge field), take Envoy's stream-end charges in full.
func TestUsageChargesOverXDS(t *testing.T) {
	xsrv := xdstest.Start(t)
	// The route descriptor as Envoy Gateway 1.9 renders it, and as its
	// generic_key action sends it (examples/llm-tokens).
	const route = "httproute/default/llm/rule/0/match/0/*"
	xsrv.Set(t, "envoy-ratelimit", "1", &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: route, Value: route,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "rule-0-match-0",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1000},
		}},
	}}})
	s := startXDS(t, io.Discard, xsrv)
	s.awaitHealth(t, healthpb.HealthCheckResponse_SERVING)
	call := func(n uint64) string {
		req := &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries:    []*rlscommon.RateLimitDescriptor_Entry{{Key: route, Value: route}, {Key: "rule-0-match-0", Value: "tenant-a"}},
			HitsAddend: wrapperspb.UInt64(n),
		}}}
		resp, err := s.rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return statuses(resp)
	}
	for i, st := range []struct {
		hits uint64
		want string
	}{{0, "OK OK/1000"}, {600, "OK OK/400"}, {0, "OK OK/400"}, {600, "OVER_LIMIT OVER_LIMIT/0"}, {0, "OVER_LIMIT OVER_LIMIT/0"}} {
		if got := call(st.hits); got != st.want {
			t.Errorf("step %d (hits_addend %d): %q, want %q", i, st.hits, got, st.want)
		}
	}
}
