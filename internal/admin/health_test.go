package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// names are the gRPC health names the tests serve, as the sidecar does:
// the server's, the RLS service's and the reference's.
var names = []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// conditions are the parts of a verdict a test changes: what
// HealthOptions reads, with a lock, since Health reads them from its own
// goroutines.
type conditions struct {
	mu       sync.Mutex
	rules    *limits.Ruleset
	refused  error
	waiting  string
	probes   int
	probeFix bool // the next probe ends the refusal
	changed  chan struct{}
}

func newConditions(t *testing.T) *conditions {
	return &conditions{rules: parse(t, rulesDoc), changed: make(chan struct{}, 1)}
}

func (c *conditions) Rules() *limits.Ruleset {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rules
}

func (c *conditions) Refused() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

func (c *conditions) Waiting() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// Probe is the store's probe: it counts, and ends the refusal if
// probeFix says the store now takes the configuration, signalling the
// change as redis.Lazy does.
func (c *conditions) Probe(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	if c.probeFix && c.refused != nil {
		c.refused = nil
		c.signal()
	}
	return c.refused
}

func (c *conditions) setRules(rs *limits.Ruleset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules = rs
}

func (c *conditions) setRefused(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused = err
	c.signal()
}

// signal tells of a refusal change; requires c.mu held.
func (c *conditions) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// options returns the HealthOptions of c, with every condition on.
func (c *conditions) options() admin.HealthOptions {
	return admin.HealthOptions{
		Rules:              c.Rules,
		RequireRules:       true,
		Refused:            c.Refused,
		RequireStoreConfig: true,
		RefusalChanged:     c.changed,
		RulesWaiting:       c.Waiting,
		Probe:              c.Probe,
		Names:              names,
	}
}

var errRefused = fmt.Errorf("%w: WRONGPASS invalid username-password pair", admin.ErrMisconfigured)

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestVerdictCauses: each condition, alone, makes the verdict with its
// cause and reason; the first that holds wins.
func TestVerdictCauses(t *testing.T) {
	empty := limits.NewRuleset(nil, nil, "")
	tests := []struct {
		name       string
		give       func(c *conditions, o *admin.HealthOptions)
		wantCause  admin.Cause
		wantReason string
	}{
		{"serving", func(*conditions, *admin.HealthOptions) {}, admin.CauseNone, ""},
		{"stopping", func(_ *conditions, o *admin.HealthOptions) { o.Stopping = closed() }, admin.CauseStopping, "shutting down"},
		{"waiting for rules", func(c *conditions, o *admin.HealthOptions) {
			o.RulesReady = make(chan struct{})
			c.waiting = "waiting for xds server 127.0.0.1:1"
		}, admin.CauseWaiting, "waiting for xds server 127.0.0.1:1"},
		{"waiting, no RulesWaiting", func(_ *conditions, o *admin.HealthOptions) {
			o.RulesReady = make(chan struct{})
			o.RulesWaiting = nil
		}, admin.CauseWaiting, "waiting for rules"},
		{"rules arrived", func(_ *conditions, o *admin.HealthOptions) { o.RulesReady = closed() }, admin.CauseNone, ""},
		{"no rules, required", func(c *conditions, _ *admin.HealthOptions) { c.rules = empty }, admin.CauseNoRules, "no rules loaded"},
		{"no rules, not required", func(c *conditions, o *admin.HealthOptions) {
			c.rules = empty
			o.RequireRules = false
		}, admin.CauseNone, ""},
		{"refused, required", func(c *conditions, _ *admin.HealthOptions) { c.refused = errRefused }, admin.CauseRefused, errRefused.Error()},
		{"refused, not required", func(c *conditions, o *admin.HealthOptions) {
			c.refused = errRefused
			o.RequireStoreConfig = false
		}, admin.CauseNone, ""},
		{"stopping before waiting", func(_ *conditions, o *admin.HealthOptions) {
			o.Stopping = closed()
			o.RulesReady = make(chan struct{})
		}, admin.CauseStopping, "shutting down"},
		{"waiting before no rules", func(c *conditions, o *admin.HealthOptions) {
			o.RulesReady = make(chan struct{})
			c.waiting = "waiting for eg"
			c.rules = empty
		}, admin.CauseWaiting, "waiting for eg"},
		{"no rules before refused", func(c *conditions, _ *admin.HealthOptions) {
			c.rules = empty
			c.refused = errRefused
		}, admin.CauseNoRules, "no rules loaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConditions(t)
			o := c.options()
			tt.give(c, &o)
			v := admin.NewHealth(o).Verdict()
			if v.Cause != tt.wantCause || v.Reason != tt.wantReason || v.Serving() != (tt.wantCause == admin.CauseNone) {
				t.Errorf("verdict = %+v (serving %v), want cause %v with %q", v, v.Serving(), tt.wantCause, tt.wantReason)
			}
		})
	}
}

// surfaces are the three readers of one verdict, served as the sidecar
// serves them: gRPC health on a loopback listener, /healthcheck and
// /readyz on an httptest server.
type surfaces struct {
	h      *admin.Health
	health healthpb.HealthClient
	http   *httptest.Server
}

// serve serves h's gRPC health and the probes of h, with a store that is
// ready.
func serve(t *testing.T, h *admin.Health, rules func() *limits.Ruleset) *surfaces {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	h.Register(gs)
	go gs.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	a := admin.New(admin.Options{
		Health: h, Rules: rules, StoreReady: func(context.Context) error { return nil },
		FailingDomains: func() []string { return nil },
	})
	mux := http.NewServeMux()
	a.Health(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &surfaces{h: h, health: healthpb.NewHealthClient(conn), http: hs}
}

func (s *surfaces) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return getPath(t, s.http, path)
}

// getPath GETs path of srv and returns the status and body.
func getPath(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// agree checks that every gRPC health name, /healthcheck and /readyz say
// what want says, and /healthcheck with reason.
func (s *surfaces) agree(t *testing.T, want healthpb.HealthCheckResponse_ServingStatus, reason string) {
	t.Helper()
	for _, name := range names {
		r, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatalf("gRPC health Check of %q: %v", name, err)
		}
		if r.Status != want {
			t.Errorf("gRPC health of %q = %v, want %v", name, r.Status, want)
		}
	}
	code, body := s.get(t, "/healthcheck")
	ready, rbody := s.get(t, "/readyz")
	if want == serving {
		if code != http.StatusOK || body != "OK" {
			t.Errorf("/healthcheck = %d %q, want 200 OK", code, body)
		}
		if ready != http.StatusOK {
			t.Errorf("/readyz = %d %q, want 200", ready, rbody)
		}
		return
	}
	if code == http.StatusOK || !strings.Contains(body, reason) {
		t.Errorf("/healthcheck = %d %q, want an error saying %q", code, body, reason)
	}
	if ready != http.StatusServiceUnavailable || !strings.Contains(rbody, reason) {
		t.Errorf("/readyz = %d %q, want 503 saying %q", ready, rbody, reason)
	}
}

// TestOneVerdict: gRPC health, /healthcheck and /readyz say the same
// through a run of changes, each as Refresh publishes it. A refusal lasts
// on /healthcheck as on gRPC health until the store's record of it
// changes, even while the store itself would take a probe: /healthcheck
// does not probe the store on its own.
func TestOneVerdict(t *testing.T) {
	c := newConditions(t)
	h := admin.NewHealth(c.options())
	s := serve(t, h, c.Rules)
	s.agree(t, serving, "")

	c.setRules(limits.NewRuleset(nil, nil, ""))
	s.agree(t, serving, "") // kept until Refresh
	h.Refresh()
	s.agree(t, notServing, "no rules loaded")

	c.setRules(parse(t, rulesDoc))
	c.setRefused(errRefused)
	h.Refresh()
	// The store itself is ready (StoreReady says nil): only the verdict
	// says not serving, on every surface alike.
	s.agree(t, notServing, "WRONGPASS")

	c.setRefused(nil)
	h.Refresh()
	s.agree(t, serving, "")

	h.Shutdown()
	s.agree(t, notServing, "shutting down")
	h.Refresh() // after Shutdown, nothing brings it back
	s.agree(t, notServing, "shutting down")
}

// TestHealthcheckWaitingIs503: while the rule source waits for its first
// rules, /healthcheck and /readyz answer 503 with what it waits for, as
// they always have, and gRPC health NOT_SERVING.
func TestHealthcheckWaitingIs503(t *testing.T) {
	c := newConditions(t)
	c.waiting = "waiting for xds server 127.0.0.1:1"
	o := c.options()
	o.RulesReady = make(chan struct{})
	s := serve(t, admin.NewHealth(o), c.Rules)
	s.agree(t, notServing, c.waiting)
	if code, _ := s.get(t, "/healthcheck"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthcheck while waiting for rules = %d, want 503", code)
	}
	if code, _ := s.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while waiting for rules = %d, want 200: the process lives", code)
	}
}

// TestStoppingShowsAtOnce: once Stopping is done, /healthcheck and
// /readyz say so before anything refreshes the verdict, with 500 and 503.
func TestStoppingShowsAtOnce(t *testing.T) {
	c := newConditions(t)
	stop := make(chan struct{})
	o := c.options()
	o.Stopping = stop
	s := serve(t, admin.NewHealth(o), c.Rules)
	s.agree(t, serving, "")
	close(stop)
	if code, body := s.get(t, "/healthcheck"); code != http.StatusInternalServerError || !strings.Contains(body, "shutting down") {
		t.Errorf("/healthcheck after Stopping = %d %q, want 500 shutting down", code, body)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz after Stopping = %d %q, want 503 shutting down", code, body)
	}
}

// watch follows name's gRPC health by Watch, sending each status it
// receives, until the test ends.
func watch(t *testing.T, hc healthpb.HealthClient, name string) <-chan healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan healthpb.HealthCheckResponse_ServingStatus, 16) // more than a test sends
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		for {
			r, err := w.Recv()
			if err != nil {
				return
			}
			out <- r.Status
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return out
}

// next returns the next status of a watch, failing after a long wait.
func next(t *testing.T, c <-chan healthpb.HealthCheckResponse_ServingStatus) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	select {
	case st, ok := <-c:
		if !ok {
			t.Fatal("health Watch ended")
		}
		return st
	case <-time.After(30 * time.Second): // a bound, not a timing assert
		t.Fatal("health Watch sent nothing")
	}
	return 0
}

// await waits for c to close, failing after a long wait.
func await(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second): // a bound, not a timing assert
		t.Fatal("the verdict did not change")
	}
}

// TestRunFollowsConditions: Run publishes the first rules' arrival, a
// refusal's start and end, and shutdown as they happen; gRPC health
// Watch and Changed follow each.
func TestRunFollowsConditions(t *testing.T) {
	c := newConditions(t)
	ready, stop := make(chan struct{}), make(chan struct{})
	o := c.options()
	o.RulesReady, o.Stopping = ready, stop
	o.Probe = nil // no probe: the refusal ends as the store says so
	h := admin.NewHealth(o)
	s := serve(t, h, c.Rules)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	w := watch(t, s.health, "ratelimit")
	if st := next(t, w); st != notServing {
		t.Fatalf("Watch before the first rules: %v", st)
	}
	// step makes a change, waits for the verdict to follow and checks
	// that Watch sends want next.
	step := func(what string, change func(), want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		changed := h.Changed()
		change()
		await(t, changed)
		if st := next(t, w); st != want {
			t.Fatalf("Watch once %s: %v, want %v", what, st, want)
		}
	}
	step("rules arrived", func() { close(ready) }, serving)
	s.agree(t, serving, "")
	step("Redis refuses", func() { c.setRefused(errRefused) }, notServing)
	s.agree(t, notServing, "WRONGPASS")
	step("the refusal ends", func() { c.setRefused(nil) }, serving)
	step("shutdown began", func() { close(stop) }, notServing)
	if v := h.Verdict(); v.Cause != admin.CauseStopping {
		t.Errorf("verdict after Stopping = %+v", v)
	}
}

// TestRunProbesWhileRefused: while the verdict is a refusal, Run probes
// the store every ProbeEvery, since a sidecar that does not serve may get
// no request to show the refusal over; the probe that shows it over makes
// the verdict serving. While serving, it does not probe.
func TestRunProbesWhileRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConditions(t)
		o := c.options()
		o.ProbeEvery = time.Second
		h := admin.NewHealth(o)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go h.Run(ctx)

		time.Sleep(10 * time.Second) // fake time: ten probe periods
		synctest.Wait()
		c.mu.Lock()
		if c.probes != 0 {
			t.Errorf("%d probes while serving, want 0", c.probes)
		}
		c.mu.Unlock()

		c.setRefused(errRefused)
		synctest.Wait()
		if v := h.Verdict(); v.Cause != admin.CauseRefused {
			t.Fatalf("verdict after the refusal = %+v", v)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		c.mu.Lock()
		if c.probes != 3 {
			t.Errorf("%d probes in 3 periods of refusal, want 3", c.probes)
		}
		c.probeFix = true // Redis takes the configuration now
		c.mu.Unlock()
		if v := h.Verdict(); v.Serving() {
			t.Fatalf("serving before a probe showed the refusal over: %+v", v)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if v := h.Verdict(); !v.Serving() {
			t.Errorf("verdict after a probe that Redis took = %+v, want serving", v)
		}
	})
}

// TestChangedOnlyOnChange: a Refresh that finds the verdict as it was
// does not close Changed.
func TestChangedOnlyOnChange(t *testing.T) {
	c := newConditions(t)
	h := admin.NewHealth(c.options())
	changed := h.Changed()
	h.Refresh()
	select {
	case <-changed:
		t.Fatal("Changed closed by a Refresh that changed nothing")
	default:
	}
	c.setRefused(errors.New("x"))
	h.Refresh()
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by a Refresh that changed the verdict")
	}
}
