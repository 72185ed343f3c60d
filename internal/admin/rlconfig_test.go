package admin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// answer answers one request of method to path on h.
func answer(h http.Handler, method, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Body.String()
}

// TestRLConfigFormat: /rlconfig prints every limit of every domain in
// the reference's format, domains sorted, with what the reference cannot
// express after it.
func TestRLConfigFormat(t *testing.T) {
	rs := parse(t, `domain: b
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: user
        rate_limits:
          - {algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 5, name: per-user}
          - {unit: hour, unit_multiplier: 2, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
`, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n")
	status, body := answer(admin.RLConfig(func() *limits.Ruleset { return rs }), http.MethodGet, "/rlconfig")
	want := `a.k: unit=DAY requests_per_unit=7, shadow_mode: false, quota_mode: false
b.tenant_acme: unit=SECOND requests_per_unit=10, shadow_mode: true, quota_mode: false
b.tenant_acme.user: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false, algorithm: token_bucket, window: 1s, burst: 5, name: "per-user"
b.tenant_acme.user: unit=HOUR requests_per_unit=100, shadow_mode: false, quota_mode: false, algorithm: fixed_window, window: 2h0m0s
b.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
b.quota: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: true
`
	if status != http.StatusOK || body != want {
		t.Errorf("/rlconfig = %d\n%s\nwant\n%s", status, body, want)
	}
}

// TestDebugPort: the debug port serves an index of its endpoints and
// /rlconfig, and /debug/config only when asked (the reference's debug
// port has none).
func TestDebugPort(t *testing.T) {
	rs := parse(t, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n")
	a := admin.New(admin.Options{
		Rules: func() *limits.Ruleset { return rs },
		Status: func() config.ReloadStatus {
			return config.ReloadStatus{Checksum: rs.Checksum, Files: rs.Files, Successes: 1}
		},
	})
	for _, withConfig := range []bool{true, false} {
		mux := a.DebugPort(withConfig)
		status, index := answer(mux, http.MethodGet, "/")
		if status != http.StatusOK || !strings.Contains(index, "/rlconfig: ") || strings.Contains(index, "/debug/config: ") != withConfig {
			t.Errorf("with /debug/config %v: index %d %q", withConfig, status, index)
		}
		if status, body := answer(mux, http.MethodGet, "/rlconfig"); status != http.StatusOK || !strings.HasPrefix(body, "a.k: unit=DAY") {
			t.Errorf("with /debug/config %v: /rlconfig %d %q", withConfig, status, body)
		}
		status, body := answer(mux, http.MethodGet, "/debug/config")
		if withConfig && (status != http.StatusOK || !strings.Contains(body, `"checksum"`)) || !withConfig && status != http.StatusNotFound {
			t.Errorf("with /debug/config %v: /debug/config %d", withConfig, status)
		}
	}
}
