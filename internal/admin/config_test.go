package admin_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/alloctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

const rulesDoc = `domain: edge
failure_mode: closed
override: {algorithm: sliding_window}
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    override: {algorithm: token_bucket, burst: 9, charge: usage}
    metadata: {team: payments, "<tag>": [1, true, null]}
    descriptors:
      - key: user
        value_to_metric: true
        rate_limits:
          - {unit: minute, requests_per_unit: 10, name: per-user}
          - {unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 5}
        descriptors:
          - key: path
            value: "/api/*"
            share_threshold: true
            rate_limit: {unlimited: true, replaces: [{name: per-user}]}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
`

func parse(t testing.TB, docs ...string) *limits.Ruleset {
	t.Helper()
	var files []config.File
	for i, d := range docs {
		files = append(files, config.File{Name: fmt.Sprintf("rules%d.yaml", i), Data: []byte(d)})
	}
	rs, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// page returns a ConfigPage of rs and a status, and a function that
// changes the status as a reload attempt does.
func page(rs *limits.Ruleset, maxBytes int) (*admin.ConfigPage, func(error)) {
	var mu sync.Mutex
	st := config.ReloadStatus{Checksum: rs.Checksum, LoadedAt: time.Unix(1700000000, 0).UTC(), Files: rs.Files, Successes: 1}
	p := admin.NewConfigPage(admin.ConfigOptions{
		Status: func() config.ReloadStatus {
			mu.Lock()
			defer mu.Unlock()
			return st
		},
		Rules:    func() *limits.Ruleset { return rs },
		MaxBytes: maxBytes,
	})
	attempt := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		st.LastAttempt = st.LastAttempt.Add(time.Second)
		st.LastError = err
		st.Failures++
	}
	return p, attempt
}

func get(t testing.TB, h http.Handler) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/config", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Body.Bytes()
}

// TestConfigPageFormat: the page, written one rule at a time, is the
// indented JSON that encoding the whole view at once wrote, and says
// what the rules say.
func TestConfigPageFormat(t *testing.T) {
	rs := parse(t, rulesDoc, "domain: empty\n")
	p, attempt := page(rs, 0)
	attempt(errors.New(`rules0.yaml:3: bad "thing" <here>`))
	body := get(t, p)
	var v admin.ConfigView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	var again bytes.Buffer
	enc := json.NewEncoder(&again)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, again.Bytes()) {
		t.Errorf("page differs from the whole view encoded at once:\n%s\nwant\n%s", body, again.Bytes())
	}
	edge := v.Domains["edge"]
	switch {
	case edge.FailureMode != "closed" || len(edge.Descriptors) != 2:
		t.Errorf("edge: %+v", edge)
	case edge.Override == nil || *edge.Override != admin.OverrideView{Algorithm: "sliding_window"}:
		t.Errorf("edge's override: %+v", edge.Override)
	case edge.Descriptors[0].Override == nil || *edge.Descriptors[0].Override != admin.OverrideView{Algorithm: "token_bucket", Burst: 9, Charge: "usage"}:
		t.Errorf("tenant's override: %+v", edge.Descriptors[0].Override)
	case edge.Descriptors[0].Descriptors[0].Descriptors[0].Source != "rules0.yaml:17: descriptors[0].descriptors[0].descriptors[0]":
		t.Errorf("tenant.user.path from %q", edge.Descriptors[0].Descriptors[0].Descriptors[0].Source)
	case len(edge.Descriptors[0].Descriptors[0].Limits) != 2 || edge.Descriptors[0].Metadata["team"] != "payments":
		t.Errorf("tenant: %+v", edge.Descriptors[0])
	case v.Domains["empty"].Descriptors == nil || len(v.Domains["empty"].Descriptors) != 0:
		t.Errorf("empty: %+v", v.Domains["empty"])
	case v.LastError == "" || v.LastAttempt == nil || v.Reloads["failure"] != 1 || v.RulesOmitted != "":
		t.Errorf("status: %+v", v)
	}
}

// TestConfigPageBounded: a page past its bound leaves the rules out and
// says why, with the status still there.
func TestConfigPageBounded(t *testing.T) {
	rs := parse(t, rulesDoc)
	p, _ := page(rs, 1024)
	body := get(t, p)
	var v admin.ConfigView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	if v.Domains != nil || !strings.Contains(v.RulesOmitted, "1024 bytes") || v.Checksum != rs.Checksum {
		t.Errorf("page past 1024 bytes:\n%s", body)
	}
}

// TestConfigPageLongError: a reload error of a problem in each of
// 100,000 descriptors shows its first 64 KiB of lines in last_error and
// says how many more the log has, so the page stays within its bound
// even when it must leave the rules out.
func TestConfigPageLongError(t *testing.T) {
	rs := parse(t, rulesDoc)
	p, attempt := page(rs, 1024)
	var b strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&b, "rules.yaml:%d: descriptors[%d].rate_limit.unit: unknown unit \"x\"\n", i+3, i)
	}
	attempt(errors.New(strings.TrimSuffix(b.String(), "\n")))
	body := get(t, p)
	var v admin.ConfigView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if len(body) > 80<<10 || !strings.HasPrefix(v.LastError, "rules.yaml:3: ") || !strings.HasSuffix(v.LastError, " more lines in the sidecar's log)") {
		t.Errorf("page of %d bytes, last_error ending %q", len(body), v.LastError[max(0, len(v.LastError)-80):])
	}
}

// flatRules is domain edge with n rules on one level.
func flatRules(t testing.TB, n int) *limits.Ruleset {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: user, value: u%d, rate_limit: {unit: second, requests_per_unit: 10}}\n", i)
	}
	return parse(t, b.String())
}

// TestConfigPageConcurrentGETs: GETs at once of a large rule set's page
// cost about what one costs: the page is rendered once per ruleset and
// status, and each GET writes the same bytes. A reload attempt renders
// it again.
func TestConfigPageConcurrentGETs(t *testing.T) {
	rs := flatRules(t, 20_000)
	p, attempt := page(rs, 0)
	srv := httptest.NewServer(p)
	defer srv.Close()
	fetch := func() {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Error(err)
		}
	}
	allocated := func(gets int) uint64 {
		return alloctest.Once(func() { alloctest.Concurrently(gets, fetch) })
	}
	one := allocated(1)
	attempt(nil) // a new status: the next GETs render again
	many := allocated(32)
	t.Logf("1 GET: %d KiB; 32 GETs at once: %d KiB; %d renders", one>>10, many>>10, p.Renders())
	if many > 3*one {
		t.Errorf("32 GETs at once allocated %d KiB, %.1fx one GET's %d KiB; want about the same", many>>10, float64(many)/float64(one), one>>10)
	}
	if got := p.Renders(); got != 2 {
		t.Errorf("%d renders for two statuses, want 2", got)
	}
}
