package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestReadyzWithStoreDown: while the verdict says serving, /readyz asks
// the store. Down, it is ready when every domain in use is answered by
// its failure mode, and not when a domain's failure mode is error
// (limits.Engine.FailingDomains), which /readyz names; a store that
// refuses the sidecar's configuration is never ready. It once consulted
// only --failure-mode, not each domain's.
func TestReadyzWithStoreDown(t *testing.T) {
	down := fmt.Errorf("dial 127.0.0.1:1: connection refused: %w", limits.ErrStoreUnavailable)
	tests := []struct {
		name     string
		store    error
		failing  []string
		wantCode int
		wantBody string
	}{
		{"store up", nil, []string{"b"}, http.StatusOK, "ok\n"},
		{"down, every domain by its failure mode", down, nil, http.StatusOK, "ok (store unavailable; every domain is served by its failure mode)\n"},
		{"down, domains with failure mode error", down, []string{"b", "c"}, http.StatusServiceUnavailable, "store unavailable: " + down.Error() + "; failure mode error for domains b, c\n"},
		{"configuration refused", errRefused, nil, http.StatusServiceUnavailable, errRefused.Error() + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConditions(t)
			a := admin.New(admin.Options{
				Health: admin.NewHealth(c.options()), Rules: c.Rules,
				StoreReady:     func(context.Context) error { return tt.store },
				FailingDomains: func() []string { return tt.failing },
			})
			mux := http.NewServeMux()
			a.Health(mux)
			srv := httptest.NewServer(mux)
			defer srv.Close()
			if code, body := getPath(t, srv, "/readyz"); code != tt.wantCode || body != tt.wantBody {
				t.Errorf("/readyz = %d %q; want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}
