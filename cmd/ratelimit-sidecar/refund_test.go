package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
)

// giveBack is a descriptor that gives n hits back, as Envoy 1.38 and
// later send it for a hits_addend with is_negative_hits.
func giveBack(key, value string, n uint64) usageDesc {
	return usageDesc{key: key, value: value, hits: n, own: true, neg: true}
}

// TestRefunds replays Envoy's calls that give hits back through two
// sidecars on one Redis, deny caches on: is_negative_hits reaches the
// store as a refund, which counts whatever the call's other descriptors
// say; metrics count refunds apart from hits; the rejection log of a
// refused call names what it gave back; and sidecar B, whose deny cache
// holds a key as over, admits again once a refund through sidecar A made
// room, told by Redis, long before the window's end (an hour).
func TestRefunds(t *testing.T) {
	var log logtest.Buffer
	args := onRedis(t)
	a, b := startSidecar(t, sidecarOpts{log: &log, args: append(args, "--log-rejections", "info")}), startSidecar(t, sidecarOpts{args: args})
	// One stream-end call gives back one descriptor's estimate and
	// charges another's use; a refund in a call that another descriptor
	// refuses counts.
	a.replay(t, []replayStep{
		{[]usageDesc{charge("calls", "m", 8), charge("tokens", "m", 0)}, "OK OK/2 OK/10"},
		{[]usageDesc{giveBack("calls", "m", 8), charge("tokens", "m", 10)}, "OK OK/10 OK/0"},
		{[]usageDesc{charge("calls", "m", 9)}, "OK OK/1"},
		{[]usageDesc{giveBack("calls", "m", 9), charge("tokens", "m", 0)}, "OVER_LIMIT OK/10 OVER_LIMIT/0"},
		{[]usageDesc{charge("calls", "m", 0)}, "OK OK/10"},
	})
	_, body := a.get(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_rule_refund_total{algorithm="fixed_window",domain="llm",rule="calls",window="1h0m0s"} 17`,
		`ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="llm",rule="calls",window="1h0m0s"} 17`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(log.String(), `"refunded":[{"descriptor":0,"hits":9}]`) {
		t.Errorf("rejection log does not name the refund of the refused call:\n%s", log.String())
	}

	a.replay(t, []replayStep{{[]usageDesc{charge("calls", "fleet", 10)}, "OK OK/0"}})
	for range 2 { // the second from B's deny cache
		b.replay(t, []replayStep{{[]usageDesc{charge("calls", "fleet", 0)}, "OVER_LIMIT OVER_LIMIT/0"}})
	}
	a.replay(t, []replayStep{{[]usageDesc{giveBack("calls", "fleet", 4)}, "OK OK/4"}})
	// B learns of the refund from Redis's Pub/Sub: wait for that event,
	// bounded, by asking B until it answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := statuses(b.call(t, charge("calls", "fleet", 0)))
		if got == "OK OK/4" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar B still answers %q 30 s after a refund through A; want OK OK/4", got)
		}
		time.Sleep(10 * time.Millisecond) // between polls
	}
}
