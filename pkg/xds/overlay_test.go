package xds_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// egDomain is the domain Envoy Gateway gives the rules of listener http
// of Gateway default/eg.
const egDomain = "default/eg/http"

// egRoute is the key and value of the outer descriptor Envoy Gateway
// generates for rule 0, match 0 of HTTPRoute default/<route>, and
// egHeader the key of the first header of that rule's client selectors.
func egRoute(route string) string { return "httproute/default/" + route + "/rule/0/match/0/*" }

const egHeader = "rule-0-match-0"

// egConfig is the RateLimitConfig Envoy Gateway pushes for a
// BackendTrafficPolicy per route of routes: one rule, a Distinct
// x-user-id header, limit requests a minute.
func egConfig(requests uint32, routes ...string) *rlsconf.RateLimitConfig {
	cfg := &rlsconf.RateLimitConfig{Name: egDomain, Domain: egDomain}
	for _, r := range routes {
		cfg.Descriptors = append(cfg.Descriptors, &rlsconf.RateLimitDescriptor{
			Key: egRoute(r), Value: egRoute(r),
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key:       egHeader,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: requests},
			}},
		})
	}
	return cfg
}

// overlayFor is an overlay that sets rate_limit fields on the rule of
// route, spelled in YAML flow style.
func overlayFor(route, limit string) string {
	return "overlays:\n  - domain: " + egDomain + "\n    path:\n      - {key: " + egRoute(route) + ", value: " + egRoute(route) + "}\n      - {key: " + egHeader + "}\n    rate_limit: " + limit + "\n"
}

// writeFile replaces path's contents in one rename, as an editor or a
// ConfigMap update does.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// hitsAdmitted sends n hits of user on route and counts those admitted.
func (c *client) hitsAdmitted(t *testing.T, route, user string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		var d limits.Decision
		req := &limits.Request{Domain: egDomain, Descriptors: []limits.Descriptor{{Entries: []limits.Entry{
			{Key: egRoute(route), Value: egRoute(route)}, {Key: egHeader, Value: user}}}}}
		if err := c.engine.Decide(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
		if d.Code == limits.OK {
			admitted++
		}
	}
	return admitted
}

// limitOf is the first limit of route's header rule in the rules in use.
func (c *client) limitOf(t *testing.T, route string) string {
	t.Helper()
	for _, r := range c.engine.Rules().Rules(egDomain) {
		if r.Key == egRoute(route) && len(r.Children) == 1 && len(r.Children[0].Limits) > 0 {
			return r.Children[0].Limits[0].String()
		}
	}
	t.Fatalf("no rule for route %s", route)
	return ""
}

// TestOverlaySlidingWindow: Envoy Gateway's rules for two routes arrive
// over xDS, 4 a minute per user each; an overlay makes route api's a
// sliding window. Across a minute's boundary the fixed window of route
// web admits 8 hits in 2 seconds, twice its limit; the sliding window of
// route api admits none past the 4 it took.
func TestOverlaySlidingWindow(t *testing.T) {
	ovPath := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, ovPath, overlayFor("api", "{algorithm: sliding_window}"))
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", egConfig(4, "api", "web"))
	// A second before a minute's boundary: fixed windows start on
	// multiples of their length.
	clk := storetest.NewClock(time.Unix(1_700_000_040-1, 0))
	c := startClientOn(t, memory.New(memory.Options{Now: clk.Now}), fast(xds.Options{Server: srv.Addr, OverlayPath: ovPath}))
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("push: %v", a.err)
	}
	srv.Await(t, 0, "ACKing version 1", isACK("1"))
	if got := c.limitOf(t, "api"); !strings.HasPrefix(got, "sliding_window 4 per 1m0s") {
		t.Errorf("route api's limit: %s, want the overlay's sliding window", got)
	}
	for _, route := range []string{"web", "api"} {
		if got := c.hitsAdmitted(t, route, "alice", 4); got != 4 {
			t.Fatalf("route %s before the boundary: %d of 4 hits admitted, want 4", route, got)
		}
	}
	clk.Advance(2 * time.Second)
	if got := c.hitsAdmitted(t, "web", "alice", 8); got != 4 {
		t.Errorf("route web (fixed window) after the boundary: %d of 8 hits admitted, want 4 (a burst of twice the limit)", got)
	}
	if got := c.hitsAdmitted(t, "api", "alice", 8); got != 0 {
		t.Errorf("route api (sliding window) after the boundary: %d of 8 hits admitted, want 0 (the 4 of the last minute still count)", got)
	}
}

// TestOverlayReload: an overlay edit applies to the rules in use; a bad
// edit, or one whose fields do not fit the pushed limit, is refused and
// the last good overlay stays; restoring it clears the failure. A push
// that leaves an entry matching nothing is ACKed, and the entry is
// logged and counted.
func TestOverlayReload(t *testing.T) {
	ovPath := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, ovPath, overlayFor("api", "{algorithm: sliding_window}"))
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", egConfig(4, "api", "web"))
	o := fast(xds.Options{Server: srv.Addr, OverlayPath: ovPath, OverlayDebounce: 20 * time.Millisecond})
	c := startClient(t, o)
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("push: %v", a.err)
	}
	_, n := srv.Await(t, 0, "ACKing version 1", isACK("1"))

	good := overlayFor("api", "{algorithm: token_bucket, burst: 8}")
	writeFile(t, ovPath, good)
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("good edit: %v", a.err)
	}
	if got := c.limitOf(t, "api"); !strings.HasPrefix(got, "token_bucket 4 per 1m0s, burst 8") {
		t.Errorf("route api's limit after the edit: %s, want the edited overlay's token bucket", got)
	}

	for _, bad := range []struct{ name, give, want string }{
		{"unknown algorithm", overlayFor("api", "{algorithm: sliding}"), `overlay.yaml:6: overlays[0].rate_limit.algorithm: unknown algorithm "sliding"`},
		{"burst on a window", overlayFor("api", "{algorithm: sliding_window, burst: 8}"),
			`RateLimitConfig "default/eg/http": descriptors[0].descriptors[0].rate_limit.burst: applies only to token_bucket and leaky_bucket, not sliding_window (with ` + ovPath + `:2 overlays[0])`},
	} {
		writeFile(t, ovPath, bad.give)
		a := c.awaitApplied(t)
		if a.err == nil || !strings.Contains(a.err.Error(), bad.want) || a.status.LastError == nil {
			t.Errorf("%s: reported %v (status error %v), want an error saying %q", bad.name, a.err, a.status.LastError, bad.want)
		}
		if got := c.limitOf(t, "api"); !strings.HasPrefix(got, "token_bucket 4 per 1m0s, burst 8") {
			t.Errorf("%s: route api's limit %s, want the last good overlay's token bucket", bad.name, got)
		}
	}
	// With the bad edit still in the file, a push gets the last good
	// overlay; the status still says the file was refused.
	srv.Set(t, node, "2", egConfig(5, "api", "web"))
	_, n = srv.Await(t, n, "ACKing version 2", isACK("2"))
	if a := c.awaitApplied(t); a.status.LastError == nil {
		t.Errorf("push while the overlay file is refused: status without the overlay's error")
	}
	if got := c.limitOf(t, "api"); !strings.HasPrefix(got, "token_bucket 5 per 1m0s, burst 8") {
		t.Errorf("route api's limit after a push: %s, want the pushed count with the last good overlay's token bucket", got)
	}
	writeFile(t, ovPath, good)
	if a := c.awaitApplied(t); a.err != nil || a.status.LastError != nil {
		t.Errorf("good overlay restored: %v (status error %v), want no error", a.err, a.status.LastError)
	}

	// Route api goes from the control plane: the push is ACKed, the
	// entry for it reported, not NACKed.
	srv.Set(t, node, "3", egConfig(4, "web"))
	srv.Await(t, n, "ACKing version 3", isACK("3"))
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("push without route api: %v", a.err)
	}
	if got := c.State().OverlayUnmatched; got != 1 {
		t.Errorf("State().OverlayUnmatched %d, want 1", got)
	}
	warn := c.logs.FilterMessage("xds overlay entries match nothing in the pushed rules; the rules apply without them").All()
	if len(warn) != 1 || !strings.Contains(strings.Join(toStrings(warn[0].ContextMap()["unmatched"]), ""), `overlays[0]: matches nothing: path[0]: no descriptor with key "`+egRoute("api")) {
		t.Errorf("unmatched warnings: %v", warn)
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, s := range l {
			out = append(out, s.(string))
		}
	}
	return out
}

// TestOverlayBadAtStart: a bad overlay file stops the client's start,
// naming the file, line, path and reason.
func TestOverlayBadAtStart(t *testing.T) {
	ovPath := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, ovPath, overlayFor("api", "{algoritm: sliding_window}"))
	engine := limits.NewEngine(limits.NewRuleset(nil, nil, ""), memory.New(memory.Options{}), limits.EngineOptions{})
	_, err := xds.New(engine, nil, xds.Options{Server: "127.0.0.1:1", OverlayPath: ovPath})
	if want := "xds overlay: " + ovPath + ":6: overlays[0].rate_limit.algoritm: unknown field; did you mean algorithm?"; err == nil || err.Error() != want {
		t.Errorf("New with a bad overlay: %v, want %q", err, want)
	}
}

// TestOverlayRereadKeepsPushRejection: reading an unchanged overlay
// again (SIGHUP, or an event for another file of its directory) does not
// clear the error of a push that stands rejected.
func TestOverlayRereadKeepsPushRejection(t *testing.T) {
	ovPath := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, ovPath, overlayFor("api", "{algorithm: sliding_window}"))
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", egConfig(4, "api"))
	c := startClient(t, fast(xds.Options{Server: srv.Addr, OverlayPath: ovPath}))
	c.awaitApplied(t)
	bad := egConfig(4, "api")
	bad.Descriptors[0].Descriptors[0].RateLimit.Unit = 42
	srv.Set(t, node, "2", bad)
	if a := c.awaitApplied(t); a.err == nil {
		t.Fatal("a push with an unknown unit was applied")
	}
	if _, err := c.ReloadOverlay(); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().LastError; err == nil || !strings.Contains(err.Error(), `unknown unit "42"`) {
		t.Errorf("status error after rereading the overlay: %v, want the push's rejection", err)
	}
}

// sentAdmitted sends n hits of user on route, each with Envoy's own limit
// of requests a minute (descriptor.limit, as Envoy Gateway's
// limit.fromMetadata sends it), and counts those admitted.
func (c *client) sentAdmitted(t *testing.T, route, user string, requests uint64, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		var d limits.Decision
		req := &limits.Request{Domain: egDomain, Descriptors: []limits.Descriptor{{
			Entries:  []limits.Entry{{Key: egRoute(route), Value: egRoute(route)}, {Key: egHeader, Value: user}},
			Override: &limits.Override{Requests: requests, Unit: limits.UnitMinute},
		}}}
		if err := c.engine.Decide(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
		if d.Code == limits.OK {
			admitted++
		}
	}
	return admitted
}

// TestOverlayOverride: Envoy Gateway pushes its rules for two routes
// (100 an hour per user: limit.fromMetadata's default) and Envoy sends
// each tenant's own limit of 4 a minute with the descriptor; an overlay
// says route api's is counted by a token bucket. Across a minute's
// boundary route web's, a fixed window as the reference counts it, admits
// 8 hits in 2 seconds; route api's bucket admits none past the 4 it took,
// also when the tenant's sent limit is raised to 8: the counter stays.
func TestOverlayOverride(t *testing.T) {
	ovPath := filepath.Join(t.TempDir(), "overlay.yaml")
	writeFile(t, ovPath, "overlays:\n  - domain: "+egDomain+"\n    path:\n      - {key: "+egRoute("api")+", value: "+egRoute("api")+"}\n      - {key: "+egHeader+"}\n    override: {algorithm: token_bucket}\n")
	srv := xdstest.Start(t)
	cfg := egConfig(100, "api", "web")
	for _, d := range cfg.Descriptors {
		d.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_HOUR
	}
	srv.Set(t, node, "1", cfg)
	clk := storetest.NewClock(time.Unix(1_700_000_040-1, 0))
	c := startClientOn(t, memory.New(memory.Options{Now: clk.Now}), fast(xds.Options{Server: srv.Addr, OverlayPath: ovPath}))
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("push: %v", a.err)
	}
	srv.Await(t, 0, "ACKing version 1", isACK("1"))
	for _, route := range []string{"web", "api"} {
		if got := c.sentAdmitted(t, route, "alice", 4, 6); got != 4 {
			t.Fatalf("route %s before the boundary: %d of 6 hits admitted under a sent 4 a minute, want 4", route, got)
		}
	}
	clk.Advance(2 * time.Second)
	if got := c.sentAdmitted(t, "web", "alice", 4, 8); got != 4 {
		t.Errorf("route web (fixed window) after the boundary: %d of 8 hits admitted, want 4", got)
	}
	if got := c.sentAdmitted(t, "api", "alice", 4, 8); got != 0 {
		t.Errorf("route api (token bucket) after the boundary: %d of 8 hits admitted, want 0 (one token refills in 15 s)", got)
	}
	if got := c.sentAdmitted(t, "api", "alice", 8, 8); got != 0 {
		t.Errorf("route api with the sent limit raised to 8: %d of 8 hits admitted, want 0 (the bucket keeps its level)", got)
	}
	clk.Advance(15 * time.Second)
	if got := c.sentAdmitted(t, "api", "alice", 8, 8); got != 2 {
		t.Errorf("route api 17 s after the boundary at 8 a minute: %d of 8 hits admitted, want 2", got)
	}
}
