package envoy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func postJSON(h http.Handler, method, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/json", strings.NewReader(body)))
	return rec
}

func TestJSONHandler(t *testing.T) {
	e, _ := headerEngine(t, limits.EngineOptions{}) // the clock stands at storetest.Epoch
	h := envoy.NewServer(e, zap.NewNop(), envoy.Options{}).JSONHandler()
	fixed := func(code rlsv3.RateLimitResponse_Code, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               code,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "fixed", RequestsPerUnit: 3, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			LimitRemaining:     remaining,
			DurationUntilReset: durationpb.New(time.Minute),
		}
	}
	tests := []struct {
		name       string
		give       string
		wantStatus int
		want       *rlsv3.RateLimitResponse
	}{
		{
			name:       "admitted",
			give:       `{"domain": "hdr", "descriptors": [{"entries": [{"key": "alg", "value": "fixed"}]}, {"entries": [{"key": "free", "value": "x"}]}]}`,
			wantStatus: http.StatusOK,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					fixed(rlsv3.RateLimitResponse_OK, 2),
					{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 1<<32 - 1},
				},
			},
		},
		{
			// Too many hits at once: rejected, nothing consumed, and
			// reported with 0 left (2 are, but not the 3 asked for).
			name:       "over the limit",
			give:       `{"domain": "hdr", "hits_addend": 3, "descriptors": [{"entries": [{"key": "alg", "value": "fixed"}]}]}`,
			wantStatus: http.StatusTooManyRequests,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
				Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{fixed(rlsv3.RateLimitResponse_OVER_LIMIT, 0)},
			},
		},
		{
			name:       "camel case names and a descriptor's own hits",
			give:       `{"domain": "hdr", "descriptors": [{"entries": [{"key": "alg", "value": "fixed"}], "hitsAddend": 2}]}`,
			wantStatus: http.StatusOK,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{fixed(rlsv3.RateLimitResponse_OK, 0)},
			},
		},
		{
			name:       "unknown domain",
			give:       `{"domain": "other", "descriptors": [{"entries": [{"key": "alg", "value": "fixed"}]}]}`,
			wantStatus: http.StatusOK,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses:    []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := postJSON(h, http.MethodPost, tt.give)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			got := &rlsv3.RateLimitResponse{}
			if err := protojson.Unmarshal(rec.Body.Bytes(), got); err != nil {
				t.Fatalf("response %s: %v", rec.Body, err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJSONHandlerErrors(t *testing.T) {
	const valid = `{"domain": "hdr", "descriptors": [{"entries": [{"key": "alg", "value": "fixed"}]}]}`
	e, _ := headerEngine(t, limits.EngineOptions{})
	down := limits.NewEngine(e.Rules(), downStore{}, limits.EngineOptions{FailureMode: limits.FailError})
	tests := []struct {
		name       string
		engine     *limits.Engine
		method     string
		give       string
		wantStatus int
		wantBody   string // a substring
	}{
		{name: "GET", method: http.MethodGet, wantStatus: http.StatusMethodNotAllowed, wantBody: "use POST"},
		{name: "PUT", method: http.MethodPut, give: valid, wantStatus: http.StatusMethodNotAllowed, wantBody: "use POST"},
		{name: "not JSON", give: `domain=hdr`, wantStatus: http.StatusBadRequest, wantBody: "invalid RateLimitRequest"},
		{name: "unknown field", give: `{"domain": "hdr", "colour": "blue"}`, wantStatus: http.StatusBadRequest, wantBody: `unknown field "colour"`},
		{name: "wrong type", give: `{"domain": "hdr", "hitsAddend": "many"}`, wantStatus: http.StatusBadRequest, wantBody: "invalid RateLimitRequest"},
		{name: "empty domain", give: `{"descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}`, wantStatus: http.StatusBadRequest, wantBody: "domain: must not be empty"},
		{name: "empty key", give: `{"domain": "hdr", "descriptors": [{"entries": [{"value": "b"}]}]}`, wantStatus: http.StatusBadRequest, wantBody: "descriptors[0].entries[0].key: must not be empty"},
		{name: "too large", give: `{"domain": "` + strings.Repeat("x", 1<<20) + `"}`, wantStatus: http.StatusRequestEntityTooLarge, wantBody: "larger than 1048576 bytes"},
		{name: "store down", engine: down, give: valid, wantStatus: http.StatusServiceUnavailable, wantBody: "store unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine, method := tt.engine, tt.method
			if engine == nil {
				engine = e
			}
			if method == "" {
				method = http.MethodPost
			}
			rec := postJSON(envoy.NewServer(engine, zap.NewNop(), envoy.Options{}).JSONHandler(), method, tt.give)
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("got %d %q, want %d with %q", rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
			}
			if tt.wantStatus == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow: %q, want POST", rec.Header().Get("Allow"))
			}
		})
	}
}
