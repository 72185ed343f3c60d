package llmexample_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// sample is a request as Envoy's rate limit actions see it: its headers
// and, when its stream ends, the dynamic metadata its filters wrote.
type sample struct {
	headers  map[string]string         // lower-case names
	metadata map[string]map[string]any // namespace → key → value
}

// tenant is a request of tenant id whose response used tokens, as AI
// Gateway's filter records them for aigateway.yaml's llmRequestCosts.
func tenant(id string, tokens any) sample {
	return sample{
		headers:  map[string]string{"x-tenant-id": id},
		metadata: map[string]map[string]any{aiGatewayNamespace: {"llm_total_token": tokens}},
	}
}

// envoyCalls returns the two ShouldRateLimit requests Envoy's ratelimit
// filter sends for s on a route whose per-route config is cfg: one when
// the request arrives, from the entries without apply_on_stream_done,
// and one when its stream ends, from those with it. A call without
// descriptors is nil: Envoy does not make it. Neither sets the request's
// own hits_addend; Envoy takes that from filter state that Envoy Gateway
// and AI Gateway leave unset.
func envoyCalls(cfg *rlfilterv3.RateLimitPerRoute, s sample) (atRequest, atEnd *rlsv3.RateLimitRequest, err error) {
	if cfg.GetDomain() == "" {
		return nil, nil, fmt.Errorf("the per-route config has no domain; this check does not read the filter's")
	}
	for i, rl := range cfg.GetRateLimits() {
		d, err := envoyDescriptor(rl, s)
		if err != nil {
			return nil, nil, fmt.Errorf("rate_limits[%d]: %w", i, err)
		}
		if d == nil {
			continue
		}
		call := &atRequest
		if rl.GetApplyOnStreamDone() {
			call = &atEnd
		}
		if *call == nil {
			*call = &rlsv3.RateLimitRequest{Domain: cfg.GetDomain()}
		}
		(*call).Descriptors = append((*call).Descriptors, d)
	}
	return atRequest, atEnd, nil
}

// envoyDescriptor builds the descriptor one rate_limits entry makes for
// s, as Envoy's RateLimitPerRoute entries do: its actions' entries in
// order, and its hits_addend, a fixed number or a number read from
// dynamic metadata. It returns nil when Envoy leaves the descriptor out:
// a header it needs is missing, or the metadata holds no number Envoy
// takes. Only the actions this example uses are understood; any other is
// an error, so that nothing passes by being skipped.
func envoyDescriptor(rl *routev3.RateLimit, s sample) (*rlscommon.RateLimitDescriptor, error) {
	d := &rlscommon.RateLimitDescriptor{}
	for i, a := range rl.GetActions() {
		switch {
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			key := g.GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: key, Value: g.GetDescriptorValue()})
		case a.GetRequestHeaders() != nil:
			h := a.GetRequestHeaders()
			v, ok := s.headers[h.GetHeaderName()]
			switch {
			case ok:
				d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: h.GetDescriptorKey(), Value: v})
			case h.GetSkipIfAbsent():
			default:
				return nil, nil
			}
		default:
			return nil, fmt.Errorf("actions[%d]: %v is not understood by this check", i, a)
		}
	}
	switch h := rl.GetHitsAddend(); {
	case h == nil:
	case h.GetFormat() != "":
		n, ok, err := formatHits(h.GetFormat(), s)
		if err != nil || !ok {
			return nil, err
		}
		d.HitsAddend = wrapperspb.UInt64(n)
	default:
		d.HitsAddend = wrapperspb.UInt64(h.GetNumber().GetValue())
	}
	// Envoy 1.38 and later: the descriptor's hits are given back.
	d.IsNegativeHits = rl.GetHitsAddend().GetIsNegativeHits()
	return d, nil
}

// requestHeaderFormat is the other hits_addend format this check reads:
// a request header's value.
var requestHeaderFormat = regexp.MustCompile(`^%REQ\(([^()%]+)\)%$`)

// formatHits reads a hits_addend format for s as Envoy does: a request
// header (%REQ(name)%) or dynamic metadata (see metadataHits), a number
// from 0 to maxHits. ok is false when Envoy leaves the descriptor out.
func formatHits(format string, s sample) (n uint64, ok bool, err error) {
	m := requestHeaderFormat.FindStringSubmatch(format)
	if m == nil {
		return metadataHits(format, s.metadata)
	}
	v, found := s.headers[strings.ToLower(m[1])]
	if !found {
		return 0, false, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > maxHits {
		return 0, false, nil
	}
	return uint64(f), true, nil
}

// dynamicMetadataFormat is the one hits_addend format this check reads,
// the one Envoy Gateway renders for a cost from metadata.
var dynamicMetadataFormat = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^:()%]+):([^:()%]+)\)%$`)

// maxHits is the largest hits_addend Envoy takes from a format.
const maxHits = 1_000_000_000

// metadataHits reads a hits_addend format from md as Envoy does: the
// value must be a number, or a string that parses as one, from 0 to
// maxHits, and counts its whole part. ok is false when it is missing or
// not such a number, and Envoy leaves the descriptor out.
func metadataHits(format string, md map[string]map[string]any) (n uint64, ok bool, err error) {
	m := dynamicMetadataFormat.FindStringSubmatch(format)
	if m == nil {
		return 0, false, fmt.Errorf("hits_addend format %q is not understood by this check", format)
	}
	var f float64
	switch v := md[m[1]][m[2]].(type) {
	case float64:
		f = v
	case int:
		f = float64(v)
	case string:
		if f, err = strconv.ParseFloat(v, 64); err != nil {
			return 0, false, nil
		}
	default:
		return 0, false, nil
	}
	if f < 0 || f > maxHits {
		return 0, false, nil
	}
	return uint64(f), true, nil
}

// entries returns a descriptor's entries as the sidecar matches them.
func entries(d *rlscommon.RateLimitDescriptor) []limits.Entry {
	out := make([]limits.Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		out[i] = limits.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return out
}

// tenantDescriptor is the descriptor of routes.yaml for tenant id, with
// hits_addend hits.
func tenantDescriptor(id string, hits uint64) *rlscommon.RateLimitDescriptor {
	return &rlscommon.RateLimitDescriptor{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{
			{Key: routeKey, Value: routeKey},
			{Key: tenantKey, Value: id},
		},
		HitsAddend: wrapperspb.UInt64(hits),
	}
}

// TestEnvoyCalls: the calls Envoy makes for routes.yaml. Per request two:
// a check with the descriptor's own hits_addend set to 0, then at stream
// end the same descriptor with its hits_addend set to the tokens used;
// the request's own hits_addend is 0 in both.
func TestEnvoyCalls(t *testing.T) {
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 1 {
		t.Fatalf("routes.yaml: %d rate-limited routes, want 1", len(routes))
	}
	call := func(d *rlscommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlscommon.RateLimitDescriptor{d}}
	}
	tests := []struct {
		name             string
		give             sample
		atRequest, atEnd *rlsv3.RateLimitRequest
	}{
		{
			name:      "answer of 600 tokens",
			give:      tenant("t1", 600.0),
			atRequest: call(tenantDescriptor("t1", 0)),
			atEnd:     call(tenantDescriptor("t1", 600)),
		},
		{
			name:      "count written as a string",
			give:      tenant("t1", "600"),
			atRequest: call(tenantDescriptor("t1", 0)),
			atEnd:     call(tenantDescriptor("t1", 600)),
		},
		{
			// Its stream-end call is a check, not a charge.
			name:      "answer of 0 tokens",
			give:      tenant("t1", 0.0),
			atRequest: call(tenantDescriptor("t1", 0)),
			atEnd:     call(tenantDescriptor("t1", 0)),
		},
		{
			// A request answered 429 never reached the model: AI Gateway
			// wrote no count, so Envoy charges nothing.
			name:      "no count in metadata",
			give:      sample{headers: map[string]string{"x-tenant-id": "t1"}},
			atRequest: call(tenantDescriptor("t1", 0)),
		},
		{
			name:      "count beyond what Envoy takes",
			give:      tenant("t1", 2e9),
			atRequest: call(tenantDescriptor("t1", 0)),
		},
		{
			// No x-tenant-id: no descriptor, so no budget applies.
			name: "anonymous",
			give: sample{metadata: tenant("", 600.0).metadata},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			atRequest, atEnd, err := envoyCalls(routes[0].cfg, tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.atRequest, atRequest, protocmp.Transform()); diff != "" {
				t.Errorf("call at request time (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.atEnd, atEnd, protocmp.Transform()); diff != "" {
				t.Errorf("call at stream end (-want +got):\n%s", diff)
			}
		})
	}
}

// pushedRules serves cfg from an xDS server on loopback, as Envoy Gateway
// serves the rate-limit service, to the sidecar's xDS client (pkg/xds),
// and returns the rules the client made of it: pkg/xds renders each
// RateLimitConfig as a rule document and parses it as rule files are.
func pushedRules(t *testing.T, cfg *rlsconf.RateLimitConfig) *limits.Ruleset {
	t.Helper()
	const node = "envoy-ratelimit" // Envoy Gateway's node ID for the service
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", cfg)
	engine := limits.NewEngine(limits.NewRuleset(nil, nil, config.Checksum(nil)), memory.New(memory.Options{}), limits.EngineOptions{})
	// Size 1: the first report is the one awaited; OnApply must not block.
	applied := make(chan error, 1)
	c, err := xds.New(engine, zap.NewNop(), xds.Options{
		Server: srv.Addr,
		NodeID: node,
		OnApply: func(_ config.ReloadStatus, err error) {
			select {
			case applied <- err:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(xdstest.Wait):
			t.Errorf("Watch did not return within %v of its context's end", xdstest.Wait)
		}
	}()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("the sidecar refused ratelimitconfig.yaml: %v", err)
		}
	case <-time.After(xdstest.Wait):
		t.Fatalf("ratelimitconfig.yaml not applied within %v", xdstest.Wait)
	}
	return engine.Rules()
}

// TestPushedRulesReachLimit: the sidecar takes ratelimitconfig.yaml over
// xDS, and both of Envoy's calls for a tenant reach its limit, the same
// rule and so the same counter: 1000 tokens an hour, a fixed window.
func TestPushedRulesReachLimit(t *testing.T) {
	rs := pushedRules(t, readRateLimitConfig(t))
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		atRequest, atEnd, err := envoyCalls(r.cfg, tenant("t1", 600.0))
		if err != nil {
			t.Fatal(err)
		}
		var reached []*limits.Rule
		for _, call := range []*rlsv3.RateLimitRequest{atRequest, atEnd} {
			for _, d := range call.GetDescriptors() {
				rule := rs.Match(call.GetDomain(), entries(d))
				if rule == nil || len(rule.Limits) == 0 {
					t.Fatalf("route %q: %v reaches no limit in domain %q", r.name, entries(d), call.GetDomain())
				}
				reached = append(reached, rule)
			}
		}
		if len(reached) != 2 || reached[0] != reached[1] {
			t.Fatalf("route %q: the two calls reach rules %v, want one rule twice", r.name, reached)
		}
		l := reached[0].Limits
		if len(l) != 1 || l[0].Algorithm != limits.FixedWindow || l[0].Requests != 1000 || l[0].Unit != limits.UnitHour {
			t.Errorf("route %q: rule %s has limits %v, want 1000 an hour in a fixed window", r.name, reached[0].Name, l)
		}
	}
}

// serve serves rs, decided on a memory store on clk, on a loopback port
// and returns a client, as Envoy reaches the sidecar: over gRPC.
func serve(t *testing.T, rs *limits.Ruleset, clk *storetest.Clock) rlsv3.RateLimitServiceClient {
	t.Helper()
	engine := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	envoy.NewServer(engine, zap.NewNop(), envoy.Options{}).Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// step is one call of Envoy's and the sidecar's answer: the overall code,
// which is the code of the call's one descriptor, and what that
// descriptor's limit has left.
type step struct {
	name      string
	at        time.Duration // since storetest.Epoch, where every window starts
	tokens    float64       // the answer's tokens, for a charge
	charge    bool          // the call at stream end, else at request time
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
}

var (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// replay makes steps' calls for tenant t1 on routes.yaml's route against
// rs, each at its time, and checks each answer.
func replay(t *testing.T, rs *limits.Ruleset, steps []step) {
	t.Helper()
	routes, err := limitedRoutes(readRoutes(t))
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	client := serve(t, rs, clk)
	for i, s := range steps {
		atRequest, atEnd, err := envoyCalls(routes[0].cfg, tenant("t1", s.tokens))
		if err != nil {
			t.Fatal(err)
		}
		call := atRequest
		if s.charge {
			call = atEnd
		}
		clk.Set(storetest.Epoch.Add(s.at))
		resp, err := client.ShouldRateLimit(context.Background(), call)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i+1, s.name, err)
		}
		st := resp.GetStatuses()
		if len(st) != 1 || resp.GetOverallCode() != s.code || st[0].GetCode() != s.code || st[0].GetLimitRemaining() != s.remaining {
			t.Errorf("step %d (%s) at %v: got %v %v, want %v with %d left", i+1, s.name, s.at, resp.GetOverallCode(), st, s.code, s.remaining)
		}
	}
}

// TestReplayFixedWindow replays Envoy's calls for one tenant against
// the rules the sidecar takes from Envoy Gateway (ratelimitconfig.yaml:
// 1000 tokens an hour, fixed window). charge is unset there, so auto
// applies: the stream-end calls carry their own hits_addend, so they are
// usage charges. A charge counts in full even past the limit, and a check
// answers OVER_LIMIT once nothing is left, until the window ends.
func TestReplayFixedWindow(t *testing.T) {
	rs := pushedRules(t, readRateLimitConfig(t))
	replay(t, rs, []step{
		{name: "check", at: 0, code: ok, remaining: 1000},
		{name: "charge 600", at: time.Second, tokens: 600, charge: true, code: ok, remaining: 400},
		{name: "check", at: 2 * time.Second, code: ok, remaining: 400},
		// 1200 of 1000: the answer was streamed already, so all of it counts.
		{name: "charge 600 past the limit", at: 3 * time.Second, tokens: 600, charge: true, code: over, remaining: 0},
		{name: "check in debt", at: 4 * time.Second, code: over, remaining: 0},
		{name: "check in the next window", at: time.Hour, code: ok, remaining: 1000},
	})
}

// TestReplayTokenBucket replays Envoy's calls against rules.yaml, whose
// token bucket refills 10,000 tokens a minute, one every 6 ms. An answer
// of 12,000 tokens on a full bucket leaves it 2,000 in debt, which the
// refill pays back in 12 s; checks fail until then.
func TestReplayTokenBucket(t *testing.T) {
	rs, err := config.Load("rules.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	replay(t, rs, []step{
		{name: "check", at: 0, code: ok, remaining: 10000},
		{name: "charge 12,000", at: 0, tokens: 12000, charge: true, code: over, remaining: 0},
		{name: "check in debt", at: 0, code: over, remaining: 0},
		{name: "check, still in debt", at: 11 * time.Second, code: over, remaining: 0},
		{name: "check, the debt paid and nothing left", at: 12 * time.Second, code: over, remaining: 0},
		// 13 s refill 2,166 tokens (13 s / 6 ms), less the 2,000 of debt.
		{name: "check", at: 13 * time.Second, code: ok, remaining: 166},
	})
}
