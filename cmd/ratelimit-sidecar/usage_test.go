package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// The tests in this file and in refund_test.go, reservation_test.go and
// concurrency_test.go prove, once each and end to end, the wiring of the
// calls Envoy makes for a usage-based limit: a descriptor's own
// hits_addend reaches the store as a usage charge, is_negative_hits as a
// refund, a hold_key entry as the request's hold; the deny cache, metrics,
// the rejection log and /debug/counters see them. What a store does with
// them is specified once, on every store, by internal/storetest
// (UsageCases, RefundCases, ReservationCases, ConcurrencyCases,
// RunInFlight); the deny cache and leases by pkg/store's tests.

// chargeRules are the rules of those tests: a tenant (1000 an hour) and
// a model (1,000,000 a day) charged together, a budget of 10 an hour
// and its token counter, a token budget that reserves each request's
// estimate (released after 5 s), and 2 requests in flight per user.
const chargeRules = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: model
    rate_limit: {unit: day, requests_per_unit: 1000000}
  - key: calls
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: budget
    hold_key: request_id
    rate_limit: {unit: hour, requests_per_unit: 10000, release_after: 5s}
  - key: user
    hold_key: request_id
    rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 2}
`

func chargeRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), chargeRules)
	return dir
}

// onRedis returns the flags of a sidecar on a private Redis, failing
// what Redis does not decide, with its deny cache on (the default).
func onRedis(t *testing.T) []string {
	t.Helper()
	srv := redistest.StartServer(t)
	return []string{"--config", chargeRulesDir(t), "--redis-url", "redis://" + srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s"}
}

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

// tenantAndModel is a tenant (1000/h) and a model (1,000,000/day) in one
// stream-end report of n tokens.
func tenantAndModel(n uint64) []usageDesc {
	return []usageDesc{charge("tenant", "t", n), charge("model", "m", n)}
}

// tenantAndModelSteps: 800 tokens, then 500 that take the tenant over,
// counted on both; the check after it is denied (by the deny cache).
var tenantAndModelSteps = []replayStep{
	{tenantAndModel(800), "OK OK/200 OK/999200"},
	{tenantAndModel(500), "OVER_LIMIT OVER_LIMIT/0 OK/998700"},
	{tenantAndModel(0), "OVER_LIMIT OVER_LIMIT/0 OK/998700"},
	{tenantAndModel(0), "OVER_LIMIT OVER_LIMIT/0 OK/998700"},
}

// TestUsageCharges replays Envoy's stream-end charges through the gRPC
// server on Redis with the deny cache on: a descriptor's own hits_addend
// is a usage charge that counts past the limit; metrics count it as
// usage, not as rejected hits; the rejection log says a charge went over;
// and /debug/counters shows the debt.
func TestUsageCharges(t *testing.T) {
	var log logtest.Buffer
	s := startSidecar(t, sidecarOpts{log: &log, args: append(onRedis(t), "--log-rejections", "info")})
	s.replay(t, tenantAndModelSteps)
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
	q := url.Values{"domain": {"llm"}, "descriptor": {"tenant=t"}}
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
		t.Errorf("/debug/counters for tenant=t: %+v, want a debt of 300", c.State)
	}
}
