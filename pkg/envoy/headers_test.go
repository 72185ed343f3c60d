package envoy_test

import (
	"context"
	"flag"
	"io"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// headerRules has one rule per algorithm, and windows that are not one
// unit long, so that w shows unit_multiplier.
const headerRules = `
domain: hdr
descriptors:
  - key: alg
    value: fixed
    rate_limit: {name: fixed, unit: minute, requests_per_unit: 3}
  - key: alg
    value: sliding
    rate_limit: {algorithm: sliding_window, unit: second, unit_multiplier: 10, requests_per_unit: 4}
  - key: alg
    value: log
    rate_limit: {name: 'log "v1"', algorithm: sliding_log, unit: minute, requests_per_unit: 2}
  - key: alg
    value: token
    rate_limit: {name: töken, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 2}
  - key: alg
    value: leaky
    rate_limit: {algorithm: leaky_bucket, unit: minute, requests_per_unit: 6, burst: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
`

// headerEngine returns an engine on a memory store whose clock stands at
// storetest.Epoch until moved.
func headerEngine(t *testing.T, o limits.EngineOptions) (*limits.Engine, *storetest.Clock) {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(headerRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	return limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), o), clk
}

// headerRequest has one descriptor per "key=value" in kvs.
func headerRequest(hits uint64, kvs ...string) *limits.Request {
	req := &limits.Request{Domain: "hdr", Hits: hits}
	for i := 0; i+1 < len(kvs); i += 2 {
		req.Descriptors = append(req.Descriptors, limits.Descriptor{Entries: []limits.Entry{{Key: kvs[i], Value: kvs[i+1]}}})
	}
	return req
}

// headers returns the headers AddHeaders adds in mode, as "Key: Value".
func headers(mode envoy.HeaderMode, d *limits.Decision) []string {
	resp := envoy.Response(d)
	envoy.AddHeaders(mode, d, resp)
	var hs []string
	for _, h := range resp.ResponseHeadersToAdd {
		hs = append(hs, h.Key+": "+h.Value)
	}
	return hs
}

type headerStep struct {
	at        time.Duration // after storetest.Epoch
	give      []string      // descriptors, as key, value pairs
	hits      uint64
	wantCode  limits.Code
	wantDraft []string
	wantIETF  []string
}

func runHeaderSteps(t *testing.T, e *limits.Engine, clk *storetest.Clock, steps []headerStep) {
	t.Helper()
	var d limits.Decision
	for i, s := range steps {
		clk.Set(storetest.Epoch.Add(s.at))
		if err := e.Decide(context.Background(), headerRequest(s.hits, s.give...), &d); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Code != s.wantCode {
			t.Errorf("step %d: code %v, want %v", i, d.Code, s.wantCode)
		}
		if diff := cmp.Diff(s.wantDraft, headers(envoy.HeadersDraft03, &d)); diff != "" {
			t.Errorf("step %d: draft03 headers (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(s.wantIETF, headers(envoy.HeadersIETF, &d)); diff != "" {
			t.Errorf("step %d: ietf headers (-want +got):\n%s", i, diff)
		}
		if got := headers(envoy.HeadersNone, &d); got != nil {
			t.Errorf("step %d: none adds %q", i, got)
		}
	}
}

func draft(limit, remaining, reset string, retry ...string) []string {
	h := []string{"RateLimit-Limit: " + limit, "RateLimit-Remaining: " + remaining, "RateLimit-Reset: " + reset}
	for _, r := range retry {
		h = append(h, "Retry-After: "+r)
	}
	return h
}

func ietf(policy, rateLimit string, retry ...string) []string {
	h := []string{"RateLimit-Policy: " + policy, "RateLimit: " + rateLimit}
	for _, r := range retry {
		h = append(h, "Retry-After: "+r)
	}
	return h
}

// TestHeadersPerAlgorithm checks the exact headers of each algorithm,
// admitted and over the limit. Reset and Retry-After round up.
func TestHeadersPerAlgorithm(t *testing.T) {
	const (
		ms  = time.Millisecond
		sec = time.Second
	)
	ok, over := limits.OK, limits.OverLimit
	tests := []struct {
		name  string
		steps []headerStep
	}{
		{
			// 3 per minute; the window ends at 60 s.
			name: "fixed window",
			steps: []headerStep{
				{at: 20*sec + 500*ms, give: []string{"alg", "fixed"}, wantCode: ok,
					wantDraft: draft("3", "2", "40"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=2;t=40`)},
				{at: 21 * sec, give: []string{"alg", "fixed"}, hits: 2, wantCode: ok,
					wantDraft: draft("3", "0", "39"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=39`)},
				{at: 30 * sec, give: []string{"alg", "fixed"}, wantCode: over,
					wantDraft: draft("3", "0", "30", "30"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=30`, "30")},
				{at: 60 * sec, give: []string{"alg", "fixed"}, wantCode: ok,
					wantDraft: draft("3", "2", "60"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=2;t=60`)},
			},
		},
		{
			// 4 per 10 s. A hit weighs on the estimate until the end of
			// the next window.
			name: "sliding window",
			steps: []headerStep{
				{at: 500 * ms, give: []string{"alg", "sliding"}, wantCode: ok,
					wantDraft: draft("4", "3", "20"), wantIETF: ietf(`"default";q=4;w=10`, `"default";r=3;t=20`)},
				{at: 500 * ms, give: []string{"alg", "sliding"}, hits: 3, wantCode: ok,
					wantDraft: draft("4", "0", "20"), wantIETF: ietf(`"default";q=4;w=10`, `"default";r=0;t=20`)},
				// One hit fits again when 4 × (10 − e)/10 ≤ 3 in the next
				// window: at e = 2.5 s, 11.5 s from now.
				{at: sec, give: []string{"alg", "sliding"}, wantCode: over,
					wantDraft: draft("4", "0", "12", "12"), wantIETF: ietf(`"default";q=4;w=10`, `"default";r=0;t=12`, "12")},
				{at: 12*sec + 500*ms, give: []string{"alg", "sliding"}, wantCode: ok,
					wantDraft: draft("4", "0", "18"), wantIETF: ietf(`"default";q=4;w=10`, `"default";r=0;t=18`)},
			},
		},
		{
			// 2 per minute; the name needs escaping.
			name: "sliding log",
			steps: []headerStep{
				{at: 10 * sec, give: []string{"alg", "log"}, wantCode: ok,
					wantDraft: draft("2", "1", "60"), wantIETF: ietf(`"log \"v1\"";q=2;w=60`, `"log \"v1\"";r=1;t=60`)},
				{at: 25 * sec, give: []string{"alg", "log"}, wantCode: ok,
					wantDraft: draft("2", "0", "60"), wantIETF: ietf(`"log \"v1\"";q=2;w=60`, `"log \"v1\"";r=0;t=60`)},
				// The hit at 10 s leaves the window at 70 s.
				{at: 30 * sec, give: []string{"alg", "log"}, wantCode: over,
					wantDraft: draft("2", "0", "40", "40"), wantIETF: ietf(`"log \"v1\"";q=2;w=60`, `"log \"v1\"";r=0;t=40`, "40")},
			},
		},
		{
			// 1 per second, burst 2; a name that is not ASCII is
			// reported as "default".
			name: "token bucket",
			steps: []headerStep{
				{at: 0, give: []string{"alg", "token"}, wantCode: ok,
					wantDraft: draft("1", "1", "1"), wantIETF: ietf(`"default";q=1;w=1`, `"default";r=1;t=1`)},
				{at: 0, give: []string{"alg", "token"}, wantCode: ok,
					wantDraft: draft("1", "0", "2"), wantIETF: ietf(`"default";q=1;w=1`, `"default";r=0;t=2`)},
				// 0.25 tokens back; the next whole one in 0.75 s.
				{at: 250 * ms, give: []string{"alg", "token"}, wantCode: over,
					wantDraft: draft("1", "0", "1", "1"), wantIETF: ietf(`"default";q=1;w=1`, `"default";r=0;t=1`, "1")},
				// 1.5 tokens back, one taken: 0.5 left, full in 1.5 s.
				{at: 1500 * ms, give: []string{"alg", "token"}, wantCode: ok,
					wantDraft: draft("1", "0", "2"), wantIETF: ietf(`"default";q=1;w=1`, `"default";r=0;t=2`)},
			},
		},
		{
			// 6 per minute (one per 10 s), burst 2.
			name: "leaky bucket",
			steps: []headerStep{
				{at: 0, give: []string{"alg", "leaky"}, wantCode: ok,
					wantDraft: draft("6", "1", "10"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=1;t=10`)},
				{at: 0, give: []string{"alg", "leaky"}, wantCode: ok,
					wantDraft: draft("6", "0", "20"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=0;t=20`)},
				{at: 5 * sec, give: []string{"alg", "leaky"}, wantCode: over,
					wantDraft: draft("6", "0", "5", "5"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=0;t=5`, "5")},
				{at: 10 * sec, give: []string{"alg", "leaky"}, wantCode: ok,
					wantDraft: draft("6", "0", "20"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=0;t=20`)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, clk := headerEngine(t, limits.EngineOptions{})
			runHeaderSteps(t, e, clk, tt.steps)
		})
	}
}

// TestHeadersMostRestrictive checks which of several descriptors the
// headers describe.
func TestHeadersMostRestrictive(t *testing.T) {
	const sec = time.Second
	ok, over := limits.OK, limits.OverLimit
	tests := []struct {
		name  string
		steps []headerStep
	}{
		{
			name: "least remaining",
			steps: []headerStep{{
				give: []string{"alg", "fixed", "alg", "token", "alg", "leaky"}, wantCode: ok,
				// fixed has 2 left, token and leaky 1: leaky resets last.
				wantDraft: draft("6", "1", "10"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=1;t=10`),
			}},
		},
		{
			name: "over beats least remaining",
			steps: []headerStep{
				{at: 20 * sec, give: []string{"alg", "fixed"}, hits: 3, wantCode: ok,
					wantDraft: draft("3", "0", "40"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=40`)},
				// token would admit, with nothing left after this hit:
				// it reports its state without the hit (2 left).
				{at: 21 * sec, give: []string{"alg", "token", "alg", "fixed"}, wantCode: over,
					wantDraft: draft("3", "0", "39", "39"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=39`, "39")},
			},
		},
		{
			name: "the over limit that resets last",
			steps: []headerStep{
				// leaky has 0 left, fixed 1.
				{at: 20 * sec, give: []string{"alg", "fixed", "alg", "leaky"}, hits: 2, wantCode: ok,
					wantDraft: draft("6", "0", "20"), wantIETF: ietf(`"default";q=6;w=60`, `"default";r=0;t=20`)},
				{at: 20 * sec, give: []string{"alg", "fixed"}, wantCode: ok,
					wantDraft: draft("3", "0", "40"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=40`)},
				// leaky admits again in 9 s, fixed in 39 s.
				{at: 21 * sec, give: []string{"alg", "leaky", "alg", "fixed"}, wantCode: over,
					wantDraft: draft("3", "0", "39", "39"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=0;t=39`, "39")},
			},
		},
		{
			name: "shadow limits are left out",
			steps: []headerStep{
				{give: []string{"shadow", "x", "alg", "fixed"}, wantCode: ok,
					wantDraft: draft("3", "2", "60"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=2;t=60`)},
				{give: []string{"shadow", "x", "alg", "fixed"}, wantCode: ok,
					wantDraft: draft("3", "1", "60"), wantIETF: ietf(`"fixed";q=3;w=60`, `"fixed";r=1;t=60`)},
				{give: []string{"shadow", "x"}, wantCode: ok},
			},
		},
		{
			name: "unlimited and unmatched add nothing",
			steps: []headerStep{
				{give: []string{"free", "x", "nothing", "y"}, wantCode: ok},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, clk := headerEngine(t, limits.EngineOptions{})
			runHeaderSteps(t, e, clk, tt.steps)
		})
	}
}

// downStore cannot decide.
type downStore struct{}

func (downStore) Apply(context.Context, *limits.Batch) error {
	return limits.ErrStoreUnavailable
}

// TestHeadersStoreDown: failing closed rejects with no quota to report;
// failing locally reports the local decision.
func TestHeadersStoreDown(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(headerRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	local := memory.New(memory.Options{Now: clk.Now})
	tests := []struct {
		name     string
		opts     limits.EngineOptions
		wantCode limits.Code
		want     []string
	}{
		{"closed", limits.EngineOptions{FailureMode: limits.FailClosed}, limits.OverLimit, nil},
		{"open", limits.EngineOptions{FailureMode: limits.FailOpen}, limits.OK, nil},
		// Three replicas share 3 per minute: 1 each.
		{"local", limits.EngineOptions{FailureMode: limits.FailLocal, Local: local, LocalDivisor: 3}, limits.OK, draft("1", "0", "60")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := limits.NewEngine(rs, downStore{}, tt.opts)
			var d limits.Decision
			if err := e.Decide(context.Background(), headerRequest(1, "alg", "fixed"), &d); err != nil {
				t.Fatal(err)
			}
			if d.Code != tt.wantCode {
				t.Errorf("code %v, want %v", d.Code, tt.wantCode)
			}
			if diff := cmp.Diff(tt.want, headers(envoy.HeadersDraft03, &d)); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAddHeadersNoneDoesNotAllocate(t *testing.T) {
	e, _ := headerEngine(t, limits.EngineOptions{})
	var d limits.Decision
	if err := e.Decide(context.Background(), headerRequest(1, "alg", "fixed"), &d); err != nil {
		t.Fatal(err)
	}
	resp := &rlsv3.RateLimitResponse{}
	if n := testing.AllocsPerRun(100, func() { envoy.AddHeaders(envoy.HeadersNone, &d, resp) }); n != 0 {
		t.Errorf("AddHeaders(HeadersNone) allocates %v times", n)
	}
	if resp.ResponseHeadersToAdd != nil {
		t.Errorf("AddHeaders(HeadersNone) added %v", resp.ResponseHeadersToAdd)
	}
}

func TestParseHeaderMode(t *testing.T) {
	tests := []struct {
		give    string
		want    envoy.HeaderMode
		wantErr bool
	}{
		{give: "none", want: envoy.HeadersNone},
		{give: "draft03", want: envoy.HeadersDraft03},
		{give: "ietf", want: envoy.HeadersIETF},
		{give: "", wantErr: true},
		{give: "IETF", wantErr: true},
		{give: "draft-03", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := envoy.ParseHeaderMode(tt.give)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("ParseHeaderMode(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
			}
			if err == nil && got.String() != tt.give {
				t.Errorf("String() = %q, want %q", got.String(), tt.give)
			}
		})
	}
}

func TestHeaderModeFlag(t *testing.T) {
	var m envoy.HeaderMode
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&m, "response-headers", "none, draft03 or ietf")
	if err := fs.Parse([]string{"--response-headers", "ietf"}); err != nil || m != envoy.HeadersIETF {
		t.Errorf("parsed %v, %v; want ietf", m, err)
	}
	if err := fs.Parse([]string{"--response-headers", "x"}); err == nil {
		t.Error("accepted --response-headers x")
	}
}
