package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests in this file replay Envoy's calls for a token budget that
// reserves an estimate: at request time [budget, request_id] with the
// request's estimate as hits_addend; at stream end the same descriptor
// with is_negative_hits (the estimate back), and [budget] with what the
// answer used. Envoy sends the stream-end call for refused requests too.

// reserveCall is request id's request-time call: its estimate.
func reserveCall(tenant, id string, estimate uint64) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries:    []*rlscommon.RateLimitDescriptor_Entry{{Key: "budget", Value: tenant}, {Key: "request_id", Value: id}},
		HitsAddend: wrapperspb.UInt64(estimate),
	}}}
}

// settleCall is request id's stream-end call: the estimate back, and
// what the answer used charged, unless used is 0 (a refused request has
// no answer).
func settleCall(tenant, id string, estimate, used uint64) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries:        []*rlscommon.RateLimitDescriptor_Entry{{Key: "budget", Value: tenant}, {Key: "request_id", Value: id}},
		HitsAddend:     wrapperspb.UInt64(estimate),
		IsNegativeHits: true,
	}}}
	if used > 0 {
		req.Descriptors = append(req.Descriptors, &rlscommon.RateLimitDescriptor{
			Entries:    []*rlscommon.RateLimitDescriptor_Entry{{Key: "budget", Value: tenant}},
			HitsAddend: wrapperspb.UInt64(used),
		})
	}
	return req
}

// budgetLeft sends req and returns its overall code and the last
// status's remaining, as "OK/4500".
func budgetLeft(t *testing.T, s *sidecar, req *rlsv3.RateLimitRequest) string {
	t.Helper()
	resp, err := s.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	st := resp.GetStatuses()
	return fmt.Sprintf("%s/%d", resp.GetOverallCode(), st[len(st)-1].GetLimitRemaining())
}

// runReservationCases replays Envoy's calls for four requests of one
// tenant on s: estimates of 4,000 on 10,000; a refused request's stream
// end; a stream end sent twice; and b's stream end lost, so that its
// estimate is released after 5 s and counted.
func runReservationCases(t *testing.T, s *sidecar) {
	tenant := strings.ReplaceAll(t.Name(), "/", "-")
	for i, st := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{reserveCall(tenant, "a", 4000), "OK/6000"},
		{reserveCall(tenant, "b", 4000), "OK/2000"},
		{reserveCall(tenant, "c", 4000), "OVER_LIMIT/0"},
		// c was refused: its stream end gives nothing back.
		{settleCall(tenant, "c", 4000, 0), "OK/2000"},
		// a used 1,500 of its 4,000.
		{settleCall(tenant, "a", 4000, 1500), "OK/4500"},
		// The same stream end again settles nothing and charges again:
		// a stream-end call is never retried by Envoy, so this is
		// another request's use of 1,500 under a's id.
		{settleCall(tenant, "a", 4000, 1500), "OK/3000"},
		{reserveCall(tenant, "c", 4000), "OVER_LIMIT/0"},
		{reserveCall(tenant, "c", 3000), "OK/0"},
		{settleCall(tenant, "c", 3000, 3000), "OK/0"},
	} {
		if got := budgetLeft(t, s, st.req); got != st.want {
			t.Errorf("step %d: %s, want %s", i, got, st.want)
		}
	}
	// b's stream end never comes: its 4,000 come back 5 s after it
	// reserved them. Wait for the event, bounded well past that.
	deadline := time.Now().Add(60 * time.Second)
	for budgetLeft(t, s, reserveCall(tenant, "d", 4000)) != "OK/0" {
		if time.Now().After(deadline) {
			t.Fatal("b's estimate was not released 60 s after it was taken (release_after is 5 s)")
		}
		time.Sleep(50 * time.Millisecond) // between polls
	}
	metrics := s.getBody(t, "/metrics")
	want := `ratelimit_sidecar_rule_reservations_released_total{algorithm="fixed_window",domain="llm",rule="budget",window="1h0m0s"} 1`
	if !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestReservations replays Envoy's calls for four requests of one
// tenant through the gRPC server on Redis, deny cache on: the hold_key
// entry names each request's reservation, is_negative_hits settles it;
// c's refusal is remembered by the deny cache, and a's settlement must
// make it forget; b's estimate is released after release_after, which
// metrics count.
func TestReservations(t *testing.T) {
	runReservationCases(t, startSidecar(t, sidecarOpts{args: onRedis(t)}))
}
