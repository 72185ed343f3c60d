package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// overrideRules count the limits Envoy sends with a descriptor by our
// algorithms: the domain's sliding window, a token bucket for tenants, a
// sliding log for keys. Hours, so that nothing refills or slides while a
// test runs: a token comes back in 7.5 minutes at most.
const overrideRules = `domain: ai
override:
  algorithm: sliding_window
descriptors:
  - key: tenant
    override:
      algorithm: token_bucket
  - key: route
  - key: key
    override:
      algorithm: sliding_log
`

// TestOverrideAlgorithmsGRPC: Envoy's descriptor.limit through the gRPC
// server, on the memory store and Redis, counted as the rule file says.
// A tenant's sent limit changes between requests: a raised limit does
// not refill its token bucket, a lowered one holds against the hits its
// sliding window counted, and a raised one then admits the difference.
// A sent limit too large for a sliding log is InvalidArgument, naming
// the field.
func TestOverrideAlgorithmsGRPC(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), overrideRules)
	stores := map[string][]string{
		"memory": nil,
		"redis":  {"--redis-url", "redis://" + redistest.StartServer(t).Addr, "--failure-mode", "error", "--redis-timeout", "5s"},
	}
	for name, args := range stores {
		t.Run(name, func(t *testing.T) {
			s := startSidecar(t, sidecarOpts{args: append([]string{"--config", dir}, args...)})
			send := func(key, value string, requests uint32) (*rlsv3.RateLimitResponse, error) {
				return s.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*rlscommon.RateLimitDescriptor{{
					Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: key, Value: value}},
					Limit:   &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: requests, Unit: 3}, // HOUR
				}}})
			}
			steps := []struct {
				key      string
				requests uint32
				want     []rlsv3.RateLimitResponse_Code
			}{
				{"tenant", 4, []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOK, rlsOK, rlsOver}},
				{"tenant", 8, []rlsv3.RateLimitResponse_Code{rlsOver}}, // the bucket keeps its level
				{"route", 3, []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOK}},
				{"route", 2, []rlsv3.RateLimitResponse_Code{rlsOver}},               // 3 counted hold against 2
				{"route", 5, []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver}}, // the difference
				{"key", 2, []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver}},
			}
			for _, st := range steps {
				for i, want := range st.want {
					resp, err := send(st.key, "acme", st.requests)
					if err != nil {
						t.Fatalf("%s=acme under %d an hour, hit %d: %v", st.key, st.requests, i+1, err)
					}
					if got := resp.GetOverallCode(); got != want {
						t.Errorf("%s=acme under %d an hour, hit %d: %v, want %v", st.key, st.requests, i+1, got, want)
					}
					if l := resp.GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != st.requests {
						t.Errorf("%s=acme under %d an hour: current limit %v", st.key, st.requests, l)
					}
				}
			}
			_, err := send("key", "big", 20000)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].limit") {
				t.Errorf("20000 an hour by a sliding log: %v, want InvalidArgument naming descriptors[0].limit", err)
			}
		})
	}
}
