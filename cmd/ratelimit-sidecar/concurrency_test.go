package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests in this file replay Envoy's calls for a limit of requests in
// flight (envoyproxy/envoy #41219): at request time the descriptor
// [user, request_id] with hits_addend 1, and at stream end the same
// descriptor with is_negative_hits, sent for refused requests too. Envoy
// fills request_id from x-request-id, which it makes for every request.

// inFlight sends Envoy's call for request id of user under key: its
// start, or with end its stream-end call. It returns the overall code
// and the status's remaining, as "OK/1".
func inFlight(t *testing.T, s *sidecar, key, user, id string, end bool) string {
	t.Helper()
	resp, err := s.rls.ShouldRateLimit(context.Background(), inFlightRequest(key, user, id, end))
	if err != nil {
		t.Fatalf("ShouldRateLimit %s=%s %s (end %v): %v", key, user, id, end, err)
	}
	return fmt.Sprintf("%s/%d", resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining())
}

func inFlightRequest(key, user, id string, end bool) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries:        []*rlscommon.RateLimitDescriptor_Entry{{Key: key, Value: user}, {Key: "request_id", Value: id}},
		HitsAddend:     wrapperspb.UInt64(1),
		IsNegativeHits: end,
	}}}
}

// runInFlightCases replays Envoy's calls on s: exact pairing of each
// request's +1 and -1, a refused request's -1 included, and a -1 sent
// twice.
func runInFlightCases(t *testing.T, s *sidecar) {
	u := strings.ReplaceAll(t.Name(), "/", "-")
	for i, st := range []struct {
		id   string
		end  bool
		want string
	}{
		{"a", false, "OK/1"},
		{"b", false, "OK/0"},
		{"c", false, "OVER_LIMIT/0"},
		{"c", true, "OK/0"}, // the refused request ends: frees nothing
		{"d", false, "OVER_LIMIT/0"},
		{"d", true, "OK/0"},
		{"a", true, "OK/1"}, // a ends
		{"a", true, "OK/1"}, // a second -1 for a frees nothing
		{"e", false, "OK/0"},
		{"f", false, "OVER_LIMIT/0"},
		{"b", true, "OK/1"},
		{"e", true, "OK/2"},
	} {
		if got := inFlight(t, s, "user", u, st.id, st.end); got != st.want {
			t.Errorf("step %d: %s (end %v): %s, want %s", i, st.id, st.end, got, st.want)
		}
	}
}

// TestInFlight replays Envoy's calls through the gRPC server on Redis,
// deny cache on: the request_id entry names each request's slot, and its
// stream-end call frees it. A descriptor that reaches a concurrency limit
// without the entry that names the request is refused as invalid, with
// the field named.
func TestInFlight(t *testing.T) {
	s := startSidecar(t, sidecarOpts{args: onRedis(t)})
	runInFlightCases(t, s)
	req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	_, err := s.rls.ShouldRateLimit(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "descriptors[0].entries") || !strings.Contains(err.Error(), "request_id") {
		t.Errorf("a concurrency descriptor without its request_id: %v; want InvalidArgument naming descriptors[0].entries and request_id", err)
	}
}
