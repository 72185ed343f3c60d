package llmexample_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// llmRequest is a request of tenant t1 with id, asking for at most
// maxTokens, whose answer used used tokens (a negative used: the request
// was refused and never reached the model, so its metadata is unset).
func llmRequest(id string, maxTokens, used int) sample {
	s := sample{headers: map[string]string{"x-tenant-id": "t1", "x-request-id": id, "x-max-tokens": fmt.Sprint(maxTokens)}}
	if used >= 0 {
		s.metadata = map[string]map[string]any{aiGatewayNamespace: {"llm_total_token": float64(used)}}
	}
	return s
}

// TestInFlightRoutesReplay replays the calls Envoy makes for
// inflight-routes.yaml, built from its rate_limits as Envoy builds them,
// through the sidecar's gRPC server with inflight-rules.yaml: 2 requests
// in flight per tenant, exactly paired even for a refused request's
// stream-end call and a second one, a lost stream-end call whose slot
// is freed after the route's 5 minutes, and a token budget that reserves
// x-max-tokens under the request's id and settles at stream end.
func TestInFlightRoutesReplay(t *testing.T) {
	rc := &routev3.RouteConfiguration{}
	if err := decodeProto("inflight-routes.yaml", rc); err != nil {
		t.Fatal(err)
	}
	routes, err := limitedRoutes(rc)
	if err != nil || len(routes) != 1 {
		t.Fatalf("inflight-routes.yaml: %d rate-limited routes (%v), want 1", len(routes), err)
	}
	rs, err := config.Load("inflight-rules.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	client := serve(t, rs, clk)

	// call sends request s's call, at its start or (end) its stream's end,
	// and returns the overall code and each descriptor's code and what
	// its limit has left, as "OK OK/1 OK/6000".
	call := func(at time.Duration, s sample, end bool) string {
		t.Helper()
		atRequest, atEnd, err := envoyCalls(routes[0].cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		req := atRequest
		if end {
			req = atEnd
		}
		clk.Set(storetest.Epoch.Add(at))
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("at %v: %v", at, err)
		}
		parts := []string{resp.GetOverallCode().String()}
		for _, st := range resp.GetStatuses() {
			parts = append(parts, fmt.Sprintf("%s/%d", st.GetCode(), st.GetLimitRemaining()))
		}
		return strings.Join(parts, " ")
	}
	a, b, c := llmRequest("a", 4000, 1500), llmRequest("b", 4000, -1), llmRequest("c", 4000, -1)
	d, e, f := llmRequest("d", 4000, 100), llmRequest("e", 1000, -1), llmRequest("f", 1000, -1)
	for i, st := range []struct {
		at   time.Duration
		s    sample
		end  bool
		want string
	}{
		// a and b start: a slot each, and 4000 tokens each reserved.
		{0, a, false, "OK OK/1 OK/6000"},
		{0, b, false, "OK OK/0 OK/2000"},
		// c is refused: no slot is free, and its estimate does not fit.
		// It reserves nothing.
		{0, c, false, "OVER_LIMIT OVER_LIMIT/0 OVER_LIMIT/0"},
		// c's stream-end call (Envoy sends it for refused requests):
		// frees no slot, and gives nothing back, since c holds nothing;
		// its answer's count is unset, so Envoy leaves that descriptor
		// out.
		{0, c, true, "OK OK/0 OK/2000"},
		// a ends, having used 1500 tokens: its slot is free, its
		// estimate given back, its use charged: 2000 + 4000 − 1500.
		{0, a, true, "OK OK/1 OK/6000 OK/4500"},
		{0, d, false, "OK OK/0 OK/500"},
		{0, d, true, "OK OK/1 OK/4500 OK/4400"},
		// b's stream-end call never comes. e takes the last slot; the
		// bucket refills 10,000 tokens a minute (166.7 a second).
		{time.Second, e, false, "OK OK/0 OK/3566"},
		// f is refused for want of a slot: its estimate would fit, but a
		// reservation is all-or-nothing with its request, so f takes
		// nothing, and its stream-end call gives nothing back.
		{2 * time.Second, f, false, "OVER_LIMIT OVER_LIMIT/0 OK/3733"},
		{2 * time.Second, f, true, "OK OK/0 OK/3733"},
		// b's slot is held until 5 minutes after it was taken (the
		// rule's time, the route's timeout), not to the end of an hour;
		// b's estimate is released then too (the bucket has long refilled
		// it, and never holds more than full).
		{5*time.Minute - time.Millisecond, f, false, "OVER_LIMIT OVER_LIMIT/0 OK/10000"},
		{5*time.Minute - time.Millisecond, f, true, "OK OK/0 OK/10000"},
		{5 * time.Minute, f, false, "OK OK/0 OK/9000"},
	} {
		if got := call(st.at, st.s, st.end); got != st.want {
			t.Errorf("step %d at %v: %s (end %v): %s, want %s", i, st.at, st.s.headers["x-request-id"], st.end, got, st.want)
		}
	}
}
