package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// counterRules has a limit of each algorithm, a leased one and an
// unlimited one; the store's clock stands still in these tests.
func counterRules(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/counters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// counterSite is /debug/counters over a real engine on a real store,
// served by httptest.
type counterSite struct {
	engine *limits.Engine
	srv    *httptest.Server
	logs   *observer.ObservedLogs
	resets int
}

// newCounterSite serves the counter endpoints over the memory store; o's
// Rules, Validate, Store, StoreName and Log are filled in unless set.
func newCounterSite(t *testing.T, o admin.CountersOptions) *counterSite {
	t.Helper()
	now := time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC)
	st := memory.New(memory.Options{Now: func() time.Time { return now }})
	if o.Store == nil {
		o.Store = st
	}
	if o.StoreName == "" {
		o.StoreName = "memory"
	}
	return serveCounters(t, limits.NewEngine(parse(t, counterRules(t)), st, limits.EngineOptions{}), o)
}

// serveCounters serves the counter endpoints of o over engine, with o's
// Rules, Validate, Log and ResetDone filled in.
func serveCounters(t *testing.T, engine *limits.Engine, o admin.CountersOptions) *counterSite {
	t.Helper()
	s := &counterSite{engine: engine}
	core, logs := observer.New(zap.InfoLevel)
	s.logs = logs
	o.Rules, o.Validate = s.engine.Rules, s.engine.Validate
	o.Log = zap.New(core)
	o.ResetDone = func(n int) { s.resets += n }
	a := admin.New(admin.Options{Rules: s.engine.Rules, Counters: o})
	mux := http.NewServeMux()
	a.Debug(mux)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// hit decides one request of one descriptor of entries k=v.
func (s *counterSite) hit(t *testing.T, hits uint64, kv ...string) limits.Code {
	t.Helper()
	var d limits.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, limits.Entry{Key: kv[i], Value: kv[i+1]})
	}
	var dec limits.Decision
	if err := s.engine.Decide(context.Background(), &limits.Request{Domain: "edge", Hits: hits, Descriptors: []limits.Descriptor{d}}, &dec); err != nil {
		t.Fatal(err)
	}
	return dec.Code
}

// call calls path with domain=edge and the descriptors, in the URL for
// GET and in a form body for POST.
func (s *counterSite) call(t *testing.T, method, path string, descs ...string) (int, string) {
	t.Helper()
	q := url.Values{"domain": {"edge"}, "descriptor": descs}
	if method == http.MethodGet {
		return getPath(t, s.srv, path+"?"+q.Encode())
	}
	r, err := s.srv.Client().PostForm(s.srv.URL+path, q)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return r.StatusCode, string(b)
}

// counters GETs /debug/counters for the descriptors.
func (s *counterSite) counters(t *testing.T, descs ...string) admin.CountersView {
	t.Helper()
	code, body := s.call(t, http.MethodGet, "/debug/counters", descs...)
	if code != http.StatusOK {
		t.Fatalf("GET /debug/counters = %d %s", code, body)
	}
	var v admin.CountersView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET /debug/counters: %v\n%s", err, body)
	}
	return v
}

// TestCountersRead reads every algorithm's counter after known hits, an
// unlimited descriptor, one no rule matches and a counter never used.
func TestCountersRead(t *testing.T) {
	s := newCounterSite(t, admin.CountersOptions{})
	s.hit(t, 2, "user", "alice")
	s.hit(t, 4, "tenant", "acme")
	s.hit(t, 3, "path", "/x")

	v := s.counters(t, "user=alice", "tenant=acme", "path=/x", "free=1", "nothing=1")
	if v.Domain != "edge" || v.Store != "memory" || len(v.Descriptors) != 5 {
		t.Fatalf("view: %+v", v)
	}
	user := v.Descriptors[0]
	if user.Descriptor != "user=alice" || user.Result != "limited" || user.Rule != "user" || !strings.Contains(user.Source, "rules0.yaml:") || len(user.Counters) != 1 {
		t.Fatalf("user=alice: %+v", user)
	}
	c := user.Counters[0]
	if c.Limit != "fixed_window 3 per 1h0m0s" || c.Error != "" || c.Now == nil || *c.Remaining != 1 || *c.Over || c.State == nil || *c.State.Hits != 2 || c.State.WindowStart == nil {
		t.Errorf("user=alice's counter: %+v, state %+v", c, c.State)
	}
	if !strings.HasPrefix(c.Key, "{4:edge4:user5:alice}") || c.KeyHash != rejectlog.Hash(c.Key) {
		t.Errorf("key %q, hash %q", c.Key, c.KeyHash)
	}

	tenant := v.Descriptors[1].Counters
	if len(tenant) != 3 {
		t.Fatalf("tenant=acme: %d counters, want 3", len(tenant))
	}
	if sw := tenant[0]; *sw.Remaining != 6 || *sw.State.Hits != 4 || *sw.State.PreviousHits != 0 {
		t.Errorf("sliding window: %+v, state %+v", sw, sw.State)
	}
	// 4 of a burst of 10, and the clock stands still: 6 tokens exactly.
	if tb := tenant[1]; *tb.Remaining != 6 || *tb.State.Tokens != 6 || tb.State.FullAt == nil || tb.State.LastUpdate == nil {
		t.Errorf("token bucket: %+v, state %+v", tb, tb.State)
	}
	if lb := tenant[2]; *lb.Remaining != 6 || *lb.State.Backlog != 4 || lb.State.TAT == nil {
		t.Errorf("leaky bucket: %+v, state %+v", lb, lb.State)
	}
	if sl := v.Descriptors[2].Counters[0]; *sl.Remaining != 2 || *sl.State.Hits != 3 || len(sl.State.Entries) != 1 || sl.State.Entries[0].Hits != 3 {
		t.Errorf("sliding log: %+v, state %+v", sl, sl.State)
	}
	if free := v.Descriptors[3]; free.Result != "unlimited" || len(free.Counters) != 1 || free.Counters[0].Key != "" || free.Counters[0].State != nil {
		t.Errorf("free=1: %+v", free)
	}
	if none := v.Descriptors[4]; none.Result != "no rule" || len(none.Counters) != 0 || none.Reason == "" {
		t.Errorf("nothing=1: %+v", none)
	}

	// A counter never used reads fresh.
	if c := s.counters(t, "user=bob").Descriptors[0].Counters[0]; !c.State.Fresh || *c.Remaining != 3 {
		t.Errorf("user=bob: %+v, state %+v", c, c.State)
	}
}

// TestCountersBadRequest: a request the endpoint cannot read is 400
// naming the parameter.
func TestCountersBadRequest(t *testing.T) {
	s := newCounterSite(t, admin.CountersOptions{})
	tests := []struct {
		give, want string
	}{
		{"/debug/counters", "domain: required"},
		{"/debug/counters?domain=edge", "descriptor: required"},
		{"/debug/counters?domain=edge&descriptor=user", "descriptor 1: entry 0 \"user\" has no '='"},
		{"/debug/counters?domain=edge&domain=x&descriptor=a=b", "domain: give one domain"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if code, body := getPath(t, s.srv, tt.give); code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("GET %s = %d %q, want 400 saying %q", tt.give, code, body, tt.want)
			}
		})
	}
}

// TestCounterResetOffByDefault: without AllowReset
// (--admin-counter-reset), a reset is refused naming the flag, and the
// counter stays.
func TestCounterResetOffByDefault(t *testing.T) {
	s := newCounterSite(t, admin.CountersOptions{})
	s.hit(t, 3, "user", "alice")
	code, body := s.call(t, http.MethodPost, "/debug/counters/reset", "user=alice")
	if code != http.StatusForbidden || !strings.Contains(body, "--admin-counter-reset") {
		t.Errorf("POST /debug/counters/reset = %d %q; want 403 naming --admin-counter-reset", code, body)
	}
	if got := s.hit(t, 1, "user", "alice"); got != limits.OverLimit {
		t.Errorf("after a refused reset: %v, want over limit", got)
	}
	if s.resets != 0 || s.logs.Len() != 0 {
		t.Errorf("a refused reset counted %d and logged %d lines", s.resets, s.logs.Len())
	}
}

// TestCounterReset: with AllowReset, a reset deletes the counters of
// each descriptor, counts them, logs one Warn line with the values
// hashed, and the next request starts afresh.
func TestCounterReset(t *testing.T) {
	s := newCounterSite(t, admin.CountersOptions{AllowReset: true, Values: rejectlog.Hashed})
	s.hit(t, 3, "user", "alice")
	s.hit(t, 4, "tenant", "acme")
	if got := s.hit(t, 1, "user", "alice"); got != limits.OverLimit {
		t.Fatalf("before the reset: %v, want over limit", got)
	}
	code, body := s.call(t, http.MethodPost, "/debug/counters/reset", "user=alice", "tenant=acme", "free=1")
	if code != http.StatusOK {
		t.Fatalf("POST /debug/counters/reset = %d %s", code, body)
	}
	var v admin.ResetView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("reset: %v\n%s", err, body)
	}
	if v.Domain != "edge" || v.Store != "memory" || len(v.Descriptors) != 3 {
		t.Fatalf("reset view: %+v", v)
	}
	var deleted int
	for _, d := range v.Descriptors {
		for _, c := range d.Counters {
			if c.Error != "" {
				t.Errorf("%s: %s: %s", d.Descriptor, c.Limit, c.Error)
			}
			if c.Deleted {
				deleted++
			}
		}
	}
	if deleted != 4 || len(v.Descriptors[2].Counters) != 0 {
		t.Errorf("reset deleted %d counters (want 4: 1 of user, 3 of tenant), free=1 has %d", deleted, len(v.Descriptors[2].Counters))
	}
	if s.resets != 4 {
		t.Errorf("ResetDone counted %d, want 4", s.resets)
	}
	if got := s.hit(t, 1, "user", "alice"); got != limits.OK {
		t.Errorf("after the reset: %v, want OK", got)
	}
	if c := s.counters(t, "tenant=acme").Descriptors[0].Counters[0]; !c.State.Fresh {
		t.Errorf("tenant=acme after the reset: %+v", c.State)
	}

	lines := s.logs.FilterMessage("counters reset through the admin endpoint").All()
	if len(lines) != 1 || lines[0].Level != zap.WarnLevel {
		t.Fatalf("log: %+v, want one Warn line", s.logs.All())
	}
	f := lines[0].ContextMap()
	if f["domain"] != "edge" || f["counters"] != int64(4) {
		t.Errorf("log fields: %v", f)
	}
	if strings.Contains(strings.Join(anyStrings(f["descriptors"]), " "), "alice") {
		t.Errorf("the log shows a value, not its hash: %v", f["descriptors"])
	}
}

// TestCountersNotOnRequest: without CountersOptions.Rules, Debug serves
// no /debug/counters.
func TestCountersNotOnRequest(t *testing.T) {
	a := admin.New(admin.Options{Rules: func() *limits.Ruleset { return parse(t, counterRules(t)) }})
	mux := http.NewServeMux()
	a.Debug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if code, _ := getPath(t, srv, "/debug/counters?domain=edge&descriptor=user=a"); code != http.StatusNotFound {
		t.Errorf("GET /debug/counters without counters = %d, want 404", code)
	}
}

func anyStrings(v any) []string {
	switch v := v.(type) {
	case []string:
		return v
	case []any:
		out := make([]string, len(v))
		for i, x := range v {
			out[i], _ = x.(string)
		}
		return out
	}
	return nil
}

// TestCountersStoreCannotShow: a backend that cannot show its counters
// (CountersOptions.Store nil) makes both endpoints answer 501 naming it.
func TestCountersStoreCannotShow(t *testing.T) {
	e := limits.NewEngine(parse(t, counterRules(t)), memory.New(memory.Options{}), limits.EngineOptions{})
	a := admin.New(admin.Options{Rules: e.Rules, Counters: admin.CountersOptions{
		Rules: e.Rules, Validate: e.Validate, StoreName: "remote", AllowReset: true, Log: zap.NewNop(),
	}})
	mux := http.NewServeMux()
	a.Debug(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	q := url.Values{"domain": {"edge"}, "descriptor": {"user=alice"}}
	for _, req := range []func() (*http.Response, error){
		func() (*http.Response, error) { return srv.Client().Get(srv.URL + "/debug/counters?" + q.Encode()) },
		func() (*http.Response, error) { return srv.Client().PostForm(srv.URL+"/debug/counters/reset", q) },
	} {
		r, err := req()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "the remote store cannot") {
			t.Errorf("%s %s = %d %q, want 501 naming the store", r.Request.Method, r.Request.URL.Path, r.StatusCode, b)
		}
	}
}
