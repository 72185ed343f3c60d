package envoy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a POST /json body. A RateLimitRequest within the
// engine's default request limits is far smaller.
const maxJSONBody = 1 << 20

// JSONHandler returns the handler of POST /json, the HTTP twin of
// ShouldRateLimit for testing rules with curl, as envoyproxy/ratelimit's
// /json endpoint:
//
//	curl -d '{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}' localhost:8080/json
//
// The body is a RateLimitRequest in the proto3 JSON mapping; unknown fields
// are rejected. The answer is the RateLimitResponse in the same mapping,
// with status 200, or 429 when the overall code is OVER_LIMIT (as the
// reference does). The headers the response asks Envoy to add are set on
// the HTTP response too. The request counts against the limits exactly
// like one from Envoy.
//
// Errors are plain text: 400 for a body that does not parse or a request
// the engine rejects (InvalidArgument), 405 for a method other than POST,
// 413 for a body over 1 MiB, 503 when the store cannot decide
// (Unavailable), and 504 when the decision timed out.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			http.Error(w, fmt.Sprintf("body larger than %d bytes", maxJSONBody), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	req := &rlsv3.RateLimitRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		http.Error(w, "invalid RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), req)
	if err != nil {
		st := status.Convert(err)
		http.Error(w, st.Message(), httpStatus(st.Code()))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	setHeaders(w.Header(), resp.GetResponseHeadersToAdd())
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out) //nolint:errcheck // the client has gone; nothing to do
}

// setHeaders adds Envoy header values to h.
func setHeaders(h http.Header, hvs []*corev3.HeaderValue) {
	for _, hv := range hvs {
		h.Add(hv.GetKey(), hv.GetValue())
	}
}

// httpStatus maps the gRPC code of a failed decision (see Code) to an HTTP
// status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}
