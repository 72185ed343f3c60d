package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// The tests in this file replay the calls of Envoy 1.38 and later that
// give hits back: a descriptor whose action's hits_addend sets
// is_negative_hits, which Envoy sends with the descriptor's own
// hits_addend and RateLimitDescriptor.is_negative_hits. A refund is never
// refused, counts whatever the call's other descriptors say, and every
// sidecar's next check sees it.

// refundRules holds a budget of 10 an hour per algorithm, a concurrency
// limit of 2 an hour as Envoy's own example counts it (+1 at request
// time, -1 at stream end), and a second budget to charge beside a
// refund.
const refundRules = `
domain: llm
descriptors:
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 10}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 10}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 10}
  - key: leaky_bucket
    rate_limit: {algorithm: leaky_bucket, unit: hour, requests_per_unit: 10}
  - key: in_flight
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// giveBack is a descriptor that gives n hits back, as Envoy sends it for
// a hits_addend with is_negative_hits.
func giveBack(key, value string, n uint64) usageDesc {
	return usageDesc{key: key, value: value, hits: n, own: true, neg: true}
}

// refundCases are the cases of issue 35's "Why", each on counters of its
// own (the value names the run).
func refundCases(run string) map[string][]replayStep {
	cases := map[string][]replayStep{}
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket"} {
		v := run + "-a"
		// 10 an hour: 8 at request time, 5 back at stream end: 7 left.
		cases[alg+"/reserve_then_give_back"] = []replayStep{
			{[]usageDesc{charge(alg, v, 8)}, "OK OK/2"},
			{[]usageDesc{giveBack(alg, v, 5)}, "OK OK/7"},
			{[]usageDesc{charge(alg, v, 0)}, "OK OK/7"},
			{[]usageDesc{charge(alg, v, 7)}, "OK OK/0"},
			{[]usageDesc{charge(alg, v, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
		}
		// A refund on a fresh counter gives nothing: no credit.
		w := run + "-b"
		cases[alg+"/fresh_counter"] = []replayStep{
			{[]usageDesc{giveBack(alg, w, 5)}, "OK OK/10"},
			{[]usageDesc{charge(alg, w, 10)}, "OK OK/0"},
			{[]usageDesc{charge(alg, w, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
		}
		// 15 of 10 charged after the fact, then 10 back: the debt goes
		// first, and the refund's own status is OK.
		d := run + "-c"
		cases[alg+"/debt_then_refund"] = []replayStep{
			{[]usageDesc{charge(alg, d, 15)}, "OVER_LIMIT OVER_LIMIT/0"},
			{[]usageDesc{giveBack(alg, d, 2)}, "OK OK/0"},
			{[]usageDesc{charge(alg, d, 0)}, "OVER_LIMIT OVER_LIMIT/0"},
			{[]usageDesc{giveBack(alg, d, 10)}, "OK OK/7"},
			{[]usageDesc{charge(alg, d, 0)}, "OK OK/7"},
		}
	}
	// Envoy's concurrency example: +1 at request time, -1 at stream end,
	// 2 in flight. Envoy sends the stream-end call of a refused request
	// too; its +1, a descriptor's own hits_addend, counted (a usage
	// charge), so its -1 frees nothing that another request holds.
	c := run + "-user"
	cases["in_flight"] = []replayStep{
		{[]usageDesc{charge("in_flight", c, 1)}, "OK OK/1"},
		{[]usageDesc{charge("in_flight", c, 1)}, "OK OK/0"},
		{[]usageDesc{charge("in_flight", c, 1)}, "OVER_LIMIT OVER_LIMIT/0"},
		{[]usageDesc{giveBack("in_flight", c, 1)}, "OK OK/0"}, // the refused one ends
		{[]usageDesc{charge("in_flight", c, 1)}, "OVER_LIMIT OVER_LIMIT/0"},
		{[]usageDesc{giveBack("in_flight", c, 1)}, "OK OK/0"}, // and the one refused now
		{[]usageDesc{giveBack("in_flight", c, 1)}, "OK OK/1"}, // the first ends
		{[]usageDesc{charge("in_flight", c, 1)}, "OK OK/0"},
	}
	// One stream-end call gives back one descriptor's estimate and
	// charges another's use: both count.
	m := run + "-m"
	cases["give_back_and_charge"] = []replayStep{
		{[]usageDesc{charge("fixed_window", m, 8), charge("tokens", m, 0)}, "OK OK/2 OK/10"},
		{[]usageDesc{giveBack("fixed_window", m, 8), charge("tokens", m, 10)}, "OK OK/10 OK/0"},
		// A refund in a call that another descriptor refuses counts.
		{[]usageDesc{charge("fixed_window", m, 9)}, "OK OK/1"},
		{[]usageDesc{giveBack("fixed_window", m, 9), charge("tokens", m, 0)}, "OVER_LIMIT OK/10 OVER_LIMIT/0"},
		{[]usageDesc{charge("fixed_window", m, 0)}, "OK OK/10"},
	}
	return cases
}

// runRefundCases runs every case of refundCases on s.
func runRefundCases(t *testing.T, s *sidecar) {
	t.Helper()
	for name, steps := range refundCases(strings.ReplaceAll(t.Name(), "/", "-")) {
		t.Run(name, func(t *testing.T) { s.replay(t, steps) })
	}
}

func refundRulesDir(t *testing.T, rules string) string {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), rules)
	return dir
}

func TestRefundsMemory(t *testing.T) {
	runRefundCases(t, startSidecar(t, "--config", refundRulesDir(t, refundRules)))
}

// TestRefundsRedis runs the cases on Redis with the deny cache on (its
// default), which must forget what a refund changed.
func TestRefundsRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	runRefundCases(t, startSidecar(t, "--config", refundRulesDir(t, refundRules), "--redis-url", "redis://"+srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s"))
}

// TestRefundsCluster runs the cases on a 3-master Cluster, where a
// call's descriptors of different keys lie in different slots.
func TestRefundsCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	runRefundCases(t, startSidecar(t, "--config", refundRulesDir(t, refundRules), "--redis-cluster-addrs", strings.Join(c.Addrs, ","), "--failure-mode", "error", "--redis-timeout", "2s"))
}

// TestRefundsLeased: a refund is never taken from a lease; it reaches
// the fleet's budget in Redis, where a sidecar whose lease ran dry finds
// it at its next refill.
func TestRefundsLeased(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := refundRulesDir(t, strings.Replace(refundRules, "requests_per_unit: 2}", "requests_per_unit: 2, lease: 1}", 1))
	args := []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s", "--deny-cache-entries", "0"}
	a, b := startSidecar(t, args...), startSidecar(t, args...)
	ordinary := []usageDesc{{key: "in_flight", value: "fleet"}}
	b.replay(t, []replayStep{{ordinary, "OK OK/1"}})
	a.replay(t, []replayStep{{[]usageDesc{charge("in_flight", "fleet", 1)}, "OK OK/0"}})
	b.replay(t, []replayStep{{ordinary, "OVER_LIMIT OVER_LIMIT/0"}})
	a.replay(t, []replayStep{{[]usageDesc{giveBack("in_flight", "fleet", 1)}, "OK OK/1"}})
	b.replay(t, []replayStep{{ordinary, "OK OK/0"}, {ordinary, "OVER_LIMIT OVER_LIMIT/0"}})
}

// TestRefundsReachEverySidecar: sidecar B's deny cache holds a key as
// over; a refund through sidecar A makes room, and B, told of it by
// Redis, admits again, long before the window's end (an hour).
func TestRefundsReachEverySidecar(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := refundRulesDir(t, refundRules)
	args := []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--failure-mode", "error", "--redis-timeout", "2s"}
	a, b := startSidecar(t, args...), startSidecar(t, args...)
	a.replay(t, []replayStep{{[]usageDesc{charge("fixed_window", "fleet", 10)}, "OK OK/0"}})
	for range 2 { // the second from B's deny cache
		b.replay(t, []replayStep{{[]usageDesc{charge("fixed_window", "fleet", 0)}, "OVER_LIMIT OVER_LIMIT/0"}})
	}
	a.replay(t, []replayStep{{[]usageDesc{giveBack("fixed_window", "fleet", 4)}, "OK OK/4"}})
	// B learns of the refund from Redis's Pub/Sub: wait for that event,
	// bounded, by asking B until it answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := statuses(b.call(t, charge("fixed_window", "fleet", 0)))
		if got == "OK OK/4" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar B still answers %q 30 s after a refund through A; want OK OK/4", got)
		}
		time.Sleep(10 * time.Millisecond) // between polls
	}
}

// TestRefundsFailureModes: while Redis cannot decide, failure mode local
// gives refunds back on the sidecar's memory store, so the cases hold
// there; open and closed give nothing back (rule_refund_lost_total says
// how much) and never refuse a refund; error fails the call.
func TestRefundsFailureModes(t *testing.T) {
	down := redistest.StartServer(t)
	down.Kill()
	args := func(mode string) []string {
		return []string{"--config", refundRulesDir(t, refundRules), "--redis-url", "redis://" + down.Addr, "--failure-mode", mode, "--redis-timeout", "50ms"}
	}
	t.Run("local", func(t *testing.T) {
		runRefundCases(t, startSidecar(t, args("local")...))
	})
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			s := startSidecar(t, args(mode)...)
			if got := statuses(s.call(t, giveBack("tokens", "t", 5))); got != "OK OK/?" {
				t.Errorf("refund in mode %s: %q, want OK OK/?", mode, got)
			}
			_, body := s.get(t, "/metrics")
			if want := `ratelimit_sidecar_rule_refund_lost_total{algorithm="fixed_window",domain="llm",rule="tokens",window="1h0m0s"} 5`; !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		})
	}
}

// TestRefundsObserved: metrics count refunds apart from hits, and the
// rejection log of a refused call names what it gave back.
func TestRefundsObserved(t *testing.T) {
	var log logtest.Buffer
	s := startSidecarLog(t, &log, "--config", refundRulesDir(t, refundRules), "--log-rejections", "info")
	s.replay(t, refundCases("obs")["give_back_and_charge"])
	_, body := s.get(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_rule_refund_total{algorithm="fixed_window",domain="llm",rule="fixed_window",window="1h0m0s"} 17`,
		`ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="llm",rule="fixed_window",window="1h0m0s"} 17`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(log.String(), `"refunded":[{"descriptor":0,"hits":9}]`) {
		t.Errorf("rejection log does not name the refund of the refused call:\n%s", log.String())
	}
}
