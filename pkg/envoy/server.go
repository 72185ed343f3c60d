// Package envoy serves Envoy's Rate Limit Service v3 API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on top of a
// limits.Engine.
//
// It only translates: protos in, limits.Request to the engine, the
// limits.Decision back to protos, and errors to gRPC codes in one place
// (Code). On the gRPC path both directions skip the message tree and go
// straight between wire bytes and limits types (wire.go, encode.go). It
// knows nothing of YAML or Redis.
package envoy

import (
	"context"
	"errors"
	"math"
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ServiceName is the RLS v3 service's full name, also used for its gRPC
// health status.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server implements the RLS v3 service. It is safe for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	engine *limits.Engine
	log    *zap.Logger
	opts   Options
	work   sync.Pool // *work
}

// work is the per-request scratch space, pooled so that a decision does not
// allocate beyond its keys and its response.
type work struct {
	req     limits.Request
	descs   []limits.Descriptor
	entries []limits.Entry
	over    []override
	dec     limits.Decision
	hdr     headers // scratch for encode
	// bad is why the request's wire bytes could not be decoded (a
	// *limits.RequestError), or nil.
	bad error
	// md is scratch for Tracing.start.
	md incoming
}

// Options tunes a Server. The zero value is ready to use.
type Options struct {
	// Headers is the mode of the rate-limit headers the server adds to
	// every response (see addHeaders). Zero is HeadersNone.
	Headers HeaderMode
	// Shadow answers every request OK overall, whatever its limits say;
	// the descriptors' statuses, headers and metrics still tell the
	// truth. It is envoyproxy/ratelimit's SHADOW_MODE.
	Shadow bool
	// HeaderNames renames the headers of HeadersDraft03.
	HeaderNames HeaderNames
	// DynamicMetadata describes each request in its response's
	// dynamic_metadata (see metadata), as envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA.
	DynamicMetadata bool
	// Rejections, if set, is told of every request answered OVER_LIMIT.
	Rejections Rejections
	// Tracing, if set, traces every call (see Tracing); nil traces
	// nothing and costs nothing.
	Tracing *Tracing
}

// Rejections is told of the requests a Server answers OVER_LIMIT, for a
// decision log. Rejected is called before the response is sent; it must
// be fast and safe for concurrent use, and must not keep req or d.
type Rejections interface {
	Rejected(req *limits.Request, d *limits.Decision)
}

// NewServer returns a server deciding through e.
func NewServer(e *limits.Engine, log *zap.Logger, o Options) *Server {
	return &Server{engine: e, log: log, opts: o, work: sync.Pool{New: func() any { return new(work) }}}
}

// Register registers the RLS service on g, which must have been created
// with ServerOptions.
func (s *Server) Register(g *grpc.Server) { g.RegisterService(&serviceDesc, s) }

// ShouldRateLimit implements the RLS v3 API for callers that hold a
// message, such as the HTTP /json endpoint; gRPC calls decode straight from
// the wire (see ServerOptions).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	w := s.work.Get().(*work)
	defer s.work.Put(w)
	w.fill(req)
	return s.answer(ctx, w)
}

// answer decides w's request and returns the response as a message.
func (s *Server) answer(ctx context.Context, w *work) (*rlsv3.RateLimitResponse, error) {
	if err := s.decide(ctx, w); err != nil {
		return nil, err
	}
	return s.response(w), nil
}

// decide decides w's request into w.dec; its error is a gRPC status.
func (s *Server) decide(ctx context.Context, w *work) error {
	if t := s.opts.Tracing; t != nil {
		ctx, span := t.start(ctx, w)
		err := s.decideIn(ctx, w)
		t.end(span, w, err)
		return err
	}
	return s.decideIn(ctx, w)
}

// decideIn is decide under ctx, which carries the call's span if traced.
func (s *Server) decideIn(ctx context.Context, w *work) error {
	if err := s.engine.Decide(ctx, &w.req, &w.dec); err != nil {
		return s.statusError(err)
	}
	s.opts.shadow(&w.dec)
	if w.dec.Code == limits.OverLimit && s.opts.Rejections != nil {
		s.opts.Rejections.Rejected(&w.req, &w.dec)
	}
	return nil
}

// response returns w's decision as a message, with its headers.
func (s *Server) response(w *work) *rlsv3.RateLimitResponse {
	resp := response(&w.dec)
	addHeaders(s.opts.Headers, &w.dec, resp)
	if s.opts.message() {
		s.opts.HeaderNames.rename(resp)
		if s.opts.DynamicMetadata {
			resp.DynamicMetadata = metadata(&w.req, &w.dec)
		}
	}
	return resp
}

// fill converts req without copying its strings.
func (w *work) fill(req *rlsv3.RateLimitRequest) {
	n := 0
	for _, d := range req.GetDescriptors() {
		n += len(d.GetEntries())
	}
	w.entries = growEntries(w.entries, n)
	w.descs = w.descs[:0]
	w.over = w.over[:0]
	for _, d := range req.GetDescriptors() {
		w.over = append(w.over, override{}) // keep indexes aligned with descs
		start := len(w.entries)
		for _, e := range d.GetEntries() {
			w.entries = append(w.entries, limits.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		desc := limits.Descriptor{Entries: w.entries[start:len(w.entries):len(w.entries)]}
		if o := d.GetLimit(); o != nil {
			w.over[len(w.over)-1] = override{Override: limits.Override{Requests: uint64(o.GetRequestsPerUnit()), Unit: limits.Unit(o.GetUnit())}, set: true}
		}
		if h := d.GetHitsAddend(); h != nil {
			desc.Hits, desc.HasHits = h.GetValue(), true
		}
		desc.Negative = d.GetIsNegativeHits()
		w.descs = append(w.descs, desc)
	}
	// Point overrides at their final slots only now that w.over stops
	// growing.
	for i := range w.over {
		if w.over[i].set {
			w.descs[i].Override = &w.over[i].Override
		}
	}
	w.req = limits.Request{Domain: req.GetDomain(), Descriptors: w.descs, Hits: uint64(req.GetHitsAddend())}
}

func growEntries(s []limits.Entry, n int) []limits.Entry {
	clear(s)
	if cap(s) < n {
		return make([]limits.Entry, 0, n)
	}
	return s[:0]
}

// response converts a decision to the RLS response. Per descriptor, in
// request order: the code, the reported limit, what remains and the time
// until reset, in whole seconds rounded up (see resetSeconds). An
// unlimited descriptor reports no limit and the maximum remaining, and a
// descriptor without a limit reports OK alone, as envoyproxy/ratelimit
// does.
func response(d *limits.Decision) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: code(d.Code),
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(d.Statuses)),
	}
	for i := range d.Statuses {
		st := &d.Statuses[i]
		r := report(st)
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: r.code, LimitRemaining: r.remaining}
		if r.limit != nil {
			ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            r.limit.Name,
				RequestsPerUnit: r.requests,
				Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(r.limit.Unit),
			}
			ds.DurationUntilReset = &durationpb.Duration{Seconds: resetSeconds(st.Reset)}
		}
		resp.Statuses[i] = ds
	}
	return resp
}

// reported is what a descriptor status reports to Envoy. Response and the
// wire encoder (see encode.go) both read it.
type reported struct {
	code rlsv3.RateLimitResponse_Code
	// limit is the limit reported as current_limit; nil means neither
	// current_limit nor duration_until_reset.
	limit     *limits.Limit
	requests  uint32 // limit.Requests, clamped
	remaining uint32
}

func report(st *limits.Status) reported {
	r := reported{code: code(st.Code)}
	switch {
	case st.Unlimited:
		r.remaining = math.MaxUint32
	case st.Limit != nil:
		r.limit = st.Limit
		r.requests = uint32(min(st.Limit.Requests, math.MaxUint32))
		r.remaining = uint32(min(st.Remaining, math.MaxUint32))
	}
	return r
}

func code(c limits.Code) rlsv3.RateLimitResponse_Code {
	if c == limits.OverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// Code maps an engine error to its gRPC code: a malformed request is
// InvalidArgument, an expired or cancelled call keeps its context code,
// and a store that could not decide is Unavailable, which leaves the
// choice to Envoy's failure_mode_deny.
func Code(err error) codes.Code {
	var re *limits.RequestError
	switch {
	case errors.As(err, &re):
		return codes.InvalidArgument
	case errors.Is(err, ErrRequestTooLarge):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unavailable
}

func (s *Server) statusError(err error) error {
	c := Code(err)
	if c == codes.Unavailable {
		if ce := s.log.Check(zap.DebugLevel, "decision failed"); ce != nil {
			ce.Write(zap.Error(err))
		}
	}
	return status.Error(c, err.Error())
}
