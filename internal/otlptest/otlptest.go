// Package otlptest runs a real OTLP trace and metrics receiver on a
// loopback port, over gRPC (the collector's TraceService and
// MetricsService) or over HTTP (POST /v1/traces and /v1/metrics with a
// protobuf body, as the collector's otlphttp receiver takes it), and keeps
// the spans and metrics it is sent, for tests of what an exporter sends.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// Span is a span a receiver was sent, with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
	Scope    string
}

// TraceID returns the span's trace ID in hex.
func (s Span) TraceID() string { return fmt.Sprintf("%x", s.Span.GetTraceId()) }

// SpanID returns the span's ID in hex.
func (s Span) SpanID() string { return fmt.Sprintf("%x", s.Span.GetSpanId()) }

// ParentID returns the span's parent's ID in hex; empty for a root.
func (s Span) ParentID() string { return fmt.Sprintf("%x", s.Span.GetParentSpanId()) }

// Attrs returns the span's attributes, each as its value's Go value
// (string, bool, int64, float64).
func (s Span) Attrs() map[string]any { return attrs(s.Span.GetAttributes()) }

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	out := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = v.BoolValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = v.DoubleValue
		default:
			out[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return out
}

// Receiver is an OTLP trace and metrics receiver. It is safe for
// concurrent use.
type Receiver struct {
	// URL is where an exporter sends: http://127.0.0.1:port (gRPC) or
	// http://127.0.0.1:port/v1/traces (HTTP; metrics go to /v1/metrics
	// beside it, or to BaseURL, which takes either).
	URL string
	// BaseURL is http://127.0.0.1:port.
	BaseURL string
	ms      metricStore

	conns atomic.Int64
	mu    sync.Mutex
	spans []Span
	added chan struct{} // signalled, without blocking, when spans arrive
}

// Conns returns how many connections exporters have opened to r.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitSpans waits up to timeout until r has received at least n spans, and
// returns those it has.
func (r *Receiver) WaitSpans(n int, timeout time.Duration) []Span {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		if s := r.Spans(); len(s) >= n {
			return s
		}
		select {
		case <-r.added:
		case <-t.C:
			return r.Spans()
		}
	}
}

func (r *Receiver) add(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for k, v := range attrs(rs.GetResource().GetAttributes()) {
			res[k] = fmt.Sprint(v)
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: s, Resource: res, Scope: ss.GetScope().GetName()})
			}
		}
	}
	r.mu.Unlock()
	select {
	case r.added <- struct{}{}:
	default:
	}
}

// counted counts the connections its Listener accepts.
type counted struct {
	net.Listener
	n *atomic.Int64
}

func (l counted) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func listen(t testing.TB, r *Receiver) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return counted{Listener: lis, n: &r.conns}
}

// StartGRPC starts a receiver of OTLP over gRPC, stopped at cleanup.
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	return StartGRPCTLS(t, nil)
}

// StartGRPCTLS is StartGRPC over TLS with cfg; its URLs are https://.
// A nil cfg is plaintext.
func StartGRPCTLS(t testing.TB, cfg *tls.Config) *Receiver {
	t.Helper()
	r := &Receiver{added: make(chan struct{}, 1)}
	lis := listen(t, r)
	r.URL = scheme(cfg) + lis.Addr().String()
	r.BaseURL = r.URL
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	gs := grpc.NewServer(opts...)
	coltracepb.RegisterTraceServiceServer(gs, &traceService{r: r})
	colmetricspb.RegisterMetricsServiceServer(gs, &metricsService{r: r})
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return r
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s *traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// StartHTTP starts a receiver of OTLP over HTTP with protobuf bodies
// (gzipped or not), stopped at cleanup.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	return StartHTTPTLS(t, nil)
}

// StartHTTPTLS is StartHTTP over TLS with cfg; its URLs are https://. A
// nil cfg is plaintext.
func StartHTTPTLS(t testing.TB, cfg *tls.Config) *Receiver {
	t.Helper()
	r := &Receiver{added: make(chan struct{}, 1)}
	lis := listen(t, r)
	r.BaseURL = scheme(cfg) + lis.Addr().String()
	r.URL = r.BaseURL + "/v1/traces"
	if cfg != nil {
		lis = tls.NewListener(lis, cfg)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var msg coltracepb.ExportTraceServiceRequest
		if readProto(w, req, &msg) {
			r.add(&msg)
			writeProto(w, &coltracepb.ExportTraceServiceResponse{})
		}
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var msg colmetricspb.ExportMetricsServiceRequest
		if readProto(w, req, &msg) {
			r.addMetrics(&msg)
			writeProto(w, &colmetricspb.ExportMetricsServiceResponse{})
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis) //nolint:errcheck // Serve returns when Close is called
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return r
}

func scheme(cfg *tls.Config) string {
	if cfg != nil {
		return "https://"
	}
	return "http://"
}

// readProto reads an OTLP/HTTP request's protobuf body into msg, or
// answers with an error and reports false.
func readProto(w http.ResponseWriter, req *http.Request, msg proto.Message) bool {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return false
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	data, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	if err := proto.Unmarshal(data, msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeProto(w http.ResponseWriter, msg proto.Message) {
	out, _ := proto.Marshal(msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	io.Copy(w, bytes.NewReader(out)) //nolint:errcheck // the exporter has gone
}
