package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// The tests in this file replay Envoy's calls for a limit of requests in
// flight (envoyproxy/envoy #41219): at request time the descriptor
// [user, request_id] with hits_addend 1, and at stream end the same
// descriptor with is_negative_hits, sent for refused requests too. Envoy
// fills request_id from x-request-id, which it makes for every request.

// concurrencyRules allows 2 requests in flight per user, a slot freed
// after a minute if its stream-end call never comes, and 2 per user with
// slots of 2 s, for the test of a lost call.
const concurrencyRules = `
domain: llm
descriptors:
  - key: user
    hold_key: request_id
    rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 2}
  - key: short
    hold_key: request_id
    rate_limit: {algorithm: concurrency, unit: second, unit_multiplier: 2, requests_per_unit: 2}
  - key: fleet
    hold_key: request_id
    rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 5}
`

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

func concurrencyRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), concurrencyRules)
	return dir
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

func TestInFlightMemory(t *testing.T) {
	runInFlightCases(t, startSidecar(t, "--config", concurrencyRulesDir(t)))
}

func TestInFlightRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	runInFlightCases(t, startSidecar(t, "--config", concurrencyRulesDir(t), "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s"))
}

func TestInFlightCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	runInFlightCases(t, startSidecar(t, "--config", concurrencyRulesDir(t), "--redis-cluster-addrs", strings.Join(c.Addrs, ","), "--failure-mode", "error", "--redis-timeout", "2s"))
}

// TestInFlightNeedsItsID: a descriptor that reaches a concurrency limit
// without the entry that names the request is refused as invalid, with
// the field named.
func TestInFlightNeedsItsID(t *testing.T) {
	s := startSidecar(t, "--config", concurrencyRulesDir(t))
	req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
	}}}
	_, err := s.rls.ShouldRateLimit(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") || !strings.Contains(err.Error(), "descriptors[0].entries") || !strings.Contains(err.Error(), "request_id") {
		t.Errorf("a concurrency descriptor without its request_id: %v; want InvalidArgument naming descriptors[0].entries and request_id", err)
	}
}

// TestInFlightLostCallExpires: a request whose stream-end call never
// comes holds its slot for the rule's 2 s, then the slot is free: the
// refused request's status says when, and from then on it is admitted.
func TestInFlightLostCallExpires(t *testing.T) {
	srv := redistest.StartServer(t)
	s := startSidecar(t, "--config", concurrencyRulesDir(t), "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s")
	taken := time.Now()
	for _, id := range []string{"lost1", "lost2"} {
		if got := inFlight(t, s, "short", "u", id, false); !strings.HasPrefix(got, "OK/") {
			t.Fatalf("%s: %s, want OK", id, got)
		}
	}
	resp, err := s.rls.ShouldRateLimit(context.Background(), inFlightRequest("short", "u", "next", false))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a third request while two are in flight: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	reset := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration()
	if reset <= 0 || reset > 2*time.Second {
		t.Errorf("duration_until_reset %v, want the time left of the first slot, at most 2 s", reset)
	}
	// Wait for the event: ask until admitted, bounded well past 2 s.
	deadline := taken.Add(30 * time.Second)
	for inFlight(t, s, "short", "u", "next", false) != "OK/1" {
		if time.Now().After(deadline) {
			t.Fatalf("the lost requests' slots were not freed 30 s after they were taken (their time is 2 s)")
		}
		time.Sleep(20 * time.Millisecond) // between polls
	}
	if held := time.Since(taken); held < 2*time.Second {
		t.Errorf("a slot was freed %v after it was taken, before its 2 s", held)
	}
}

// resp2desc is a descriptor no rule limits, for work between calls.
func resp2desc() []*rlscommon.RateLimitDescriptor {
	return []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}
}

// TestInFlightFleet: three sidecars on one Redis and 64 clients, each
// sending its requests to a sidecar at random, never have more than 5
// requests of one user in flight, counted by the clients themselves. A
// client counts a request from its admission until just before it sends
// the stream-end call; some requests lose theirs (their slots expire),
// and refused ones send theirs too, as Envoy does.
func TestInFlightFleet(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := concurrencyRulesDir(t)
	args := []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--failure-mode", "error", "--redis-timeout", "5s"}
	fleet := []*sidecar{startSidecar(t, args...), startSidecar(t, args...), startSidecar(t, args...)}
	const (
		clients = 64
		each    = 20
		most    = 5
	)
	var (
		inFlightNow, peak, admitted, refused, lost atomic.Int64
		wg                                         sync.WaitGroup
		errs                                       = make(chan error, clients)
	)
	var losses atomic.Int64 // stream-end calls still to lose
	losses.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range each {
				id := fmt.Sprintf("c%d-%d", c, i)
				s := fleet[rng.IntN(len(fleet))]
				resp, err := s.rls.ShouldRateLimit(ctx, inFlightRequest("fleet", "u", id, false))
				if err != nil {
					errs <- fmt.Errorf("request %s: %w", id, err)
					return
				}
				ok := resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
				if ok {
					admitted.Add(1)
					n := inFlightNow.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					// The request's work: calls of another domain, which
					// take real time while the request is counted.
					for range 1 + rng.IntN(3) {
						if _, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "work", Descriptors: resp2desc()}); err != nil {
							errs <- fmt.Errorf("work of %s: %w", id, err)
							return
						}
					}
					inFlightNow.Add(-1)
				} else {
					refused.Add(1)
				}
				if ok && rng.IntN(50) == 0 && losses.Add(-1) >= 0 {
					lost.Add(1)
					continue // its stream-end call never comes
				}
				end := fleet[rng.IntN(len(fleet))]
				if _, err := end.rls.ShouldRateLimit(ctx, inFlightRequest("fleet", "u", id, true)); err != nil {
					errs <- fmt.Errorf("stream end of %s: %w", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("admitted %d, refused %d, stream-end calls lost %d, most in flight %d", admitted.Load(), refused.Load(), lost.Load(), peak.Load())
	if p := peak.Load(); p > most {
		t.Errorf("%d requests in flight at once, counted by the clients; the limit is %d", p, most)
	}
	if admitted.Load() < most {
		t.Errorf("only %d requests admitted: the test did not fill the limit", admitted.Load())
	}
	// Every slot is free but the lost ones', which expire in a minute.
	got := inFlight(t, fleet[0], "fleet", "u", "probe", false)
	if want := fmt.Sprintf("OK/%d", most-1-int(lost.Load())); got != want {
		t.Errorf("after the clients: %s, want %s (%d slots of lost calls held)", got, want, lost.Load())
	}
}
