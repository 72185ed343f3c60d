// Package tracing builds the OpenTelemetry tracer provider that the
// sidecar's spans go through: an OTLP exporter (gRPC, or HTTP with
// protobuf bodies) behind a batch span processor, a parent-based ratio
// sampler, and a propagator that reads W3C trace context and B3 headers.
//
// Nothing here is global: New returns a Provider that the caller hands to
// what it traces and shuts down (which flushes the spans still queued) when
// it stops. The exporter reads the standard OTEL_EXPORTER_OTLP_* variables
// (endpoint, headers, timeout, certificates, compression) itself, and the
// batch span processor its OTEL_BSP_* variables; Options.Endpoint, when
// set, wins over the endpoint variables.
package tracing

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// The exporter protocols.
const (
	ProtocolGRPC = "grpc" // OTLP over gRPC, by default to localhost:4317
	ProtocolHTTP = "http" // OTLP over HTTP with protobuf bodies, by default to localhost:4318
)

// tracesPath is where an OTLP/HTTP receiver takes spans, below the base
// URL that OTEL_EXPORTER_OTLP_ENDPOINT names.
const tracesPath = "/v1/traces"

// Options describes a Provider. The --tracing* flags write into it
// (Enabled, Protocol, Endpoint, SamplingRate), and the reference's
// TRACING_SERVICE_* variables into the service attributes.
type Options struct {
	// Enabled is --tracing: Start starts nothing without it. New ignores
	// it.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Endpoint is the receiver's URL, http:// (plaintext) or https://.
	// Over HTTP a URL without a path gets /v1/traces, as
	// OTEL_EXPORTER_OTLP_ENDPOINT does; a URL with a path is used as it
	// is, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is. Empty: the exporter
	// reads those variables, else sends to localhost.
	Endpoint string
	// ServiceName, ServiceNamespace and ServiceInstanceID, when set, are
	// the resource's service.name, service.namespace and
	// service.instance.id, over OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES. Where neither gives one, service.name is
	// DefaultServiceName and service.instance.id a random UUID, as
	// envoyproxy/ratelimit's is; there is no namespace. Other resource
	// attributes come from OTEL_RESOURCE_ATTRIBUTES.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// ServiceVersion is service.version; empty is left out.
	ServiceVersion string
	// SamplingRate is the share of traces sampled that start here, from 0
	// to 1. A call whose caller sent a trace context is sampled exactly
	// when the caller's is (parent-based sampling).
	SamplingRate float64
	// Log gets a warning for each batch of spans the exporter could not
	// send, and Stop's failure to send what is queued. Nil logs nothing.
	Log *zap.Logger
}

// Validate reports what is wrong with o, every problem at once.
func (o *Options) Validate() error {
	var errs []error
	for _, p := range o.problems() {
		errs = append(errs, fmt.Errorf("%s: %w", p.field, p.err))
	}
	return errors.Join(errs...)
}

// problem is what is wrong with one field of Options.
type problem struct {
	field string // as Validate names it
	err   error
}

// problems are what is wrong with o, in the order of its fields.
func (o *Options) problems() []problem {
	var out []problem
	switch o.Protocol {
	case ProtocolGRPC, ProtocolHTTP:
	default:
		out = append(out, problem{"protocol", fmt.Errorf("want grpc or http, got %q", o.Protocol)})
	}
	if o.Endpoint != "" {
		if err := CheckEndpoint(o.Endpoint); err != nil {
			out = append(out, problem{"endpoint", err})
		}
	}
	if !(o.SamplingRate >= 0 && o.SamplingRate <= 1) { // NaN too
		out = append(out, problem{"sampling rate", fmt.Errorf("want a number from 0 to 1, got %v", o.SamplingRate)})
	}
	return out
}

// CheckEndpoint reports what is wrong with an Options.Endpoint.
func CheckEndpoint(s string) error {
	_, err := EndpointURL(s)
	return err
}

// EndpointURL checks an OTLP endpoint (http:// or https://, with a host)
// and returns it parsed. internal/otlpmetrics takes its endpoints alike.
func EndpointURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("want an http:// or https:// URL, got %q", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host in %q", s)
	}
	return u, nil
}

// Provider is a tracer provider with its exporter and propagator. It is
// safe for concurrent use.
type Provider struct {
	tp   *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
	log  *zap.Logger // Options.Log, or a no-op logger

	stopped atomic.Bool // Stop was called
}

// New returns a Provider as o describes. It starts no connection: the
// exporter connects when it first sends. Shut it down when done.
func New(ctx context.Context, o Options) (*Provider, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res, err := newResource(ctx, o)
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	var sp sdktrace.SpanExporter = exp
	if o.Log != nil {
		sp = &loggedExporter{SpanExporter: exp, log: o.Log}
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(sp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SamplingRate))),
	)
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Provider{tp: tp, prop: Propagator(), log: log}, nil
}

// Tracer returns the tracer of the instrumentation scope name; nil on a
// nil Provider (tracing off).
func (p *Provider) Tracer(name string) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(name)
}

// Propagator returns the propagator that reads a caller's trace context:
// see Propagator.
func (p *Provider) Propagator() propagation.TextMapPropagator { return p.prop }

// Shutdown sends the spans still queued, within ctx, and stops the
// exporter. Spans started afterwards are dropped.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Propagator returns a propagator that reads, and writes, W3C trace context
// (traceparent, tracestate) and B3 (the single b3 header, or the
// X-B3-* headers). Reading stops at the first that holds a valid span
// context, W3C first: a caller sends one or the other, and most callers
// none, which then costs both lookups.
func Propagator() propagation.TextMapPropagator {
	return firstOf{propagation.TraceContext{}, ifAny{keys: []string{"b3", "x-b3-traceid"}, TextMapPropagator: b3.New()}}
}

// ifAny is its propagator, whose Extract runs only when one of keys is
// in the carrier: B3's Extract stores a context value (its deferred
// sampling flag) even when it finds no header at all, on every call.
type ifAny struct {
	propagation.TextMapPropagator
	keys []string
}

func (p ifAny) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	for _, k := range p.keys {
		if c.Get(k) != "" {
			return p.TextMapPropagator.Extract(ctx, c)
		}
	}
	return ctx
}

// firstOf is a composite propagator whose Extract stops at the first
// propagator that finds a valid span context. propagation's composite
// runs them all, which costs B3's five lookups and a context value even
// when traceparent was found.
type firstOf []propagation.TextMapPropagator

func (f firstOf) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	for _, p := range f {
		p.Inject(ctx, c)
	}
}

func (f firstOf) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	for _, p := range f {
		if out := p.Extract(ctx, c); trace.SpanContextFromContext(out).IsRemote() {
			return out
		}
	}
	return ctx
}

func (f firstOf) Fields() []string {
	var out []string
	for _, p := range f {
		out = append(out, p.Fields()...)
	}
	return out
}

// DefaultServiceName is service.name unless Options or the environment
// give one.
const DefaultServiceName = "ratelimit-sidecar"

// newResource describes the process: the defaults, then
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, then the service
// attributes of o; each wins over those before it.
func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	id, err := randomUUID()
	if err != nil {
		return nil, fmt.Errorf("service instance id: %w", err)
	}
	defaults := resource.NewSchemaless(attribute.String("service.name", DefaultServiceName), attribute.String("service.instance.id", id))
	var attrs []attribute.KeyValue
	for _, a := range []struct{ key, value string }{
		{"service.name", o.ServiceName}, {"service.namespace", o.ServiceNamespace},
		{"service.instance.id", o.ServiceInstanceID}, {"service.version", o.ServiceVersion},
	} {
		if a.value != "" {
			attrs = append(attrs, attribute.String(a.key, a.value))
		}
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	return resource.Merge(defaults, res)
}

func newExporter(ctx context.Context, o Options) (*otlptrace.Exporter, error) {
	var u *url.URL
	if o.Endpoint != "" {
		u, _ = EndpointURL(o.Endpoint) // checked by Validate
	}
	if o.Protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if u != nil {
		if strings.TrimSuffix(u.Path, "/") == "" {
			u.Path = tracesPath
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	return otlptracehttp.New(ctx, opts...)
}

// randomUUID returns a random (version 4) UUID.
func randomUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// loggedExporter logs the batches its exporter could not send, instead of
// handing the error to OpenTelemetry's global error handler, which would
// print it to stderr in a format of its own. The sampled log bounds the
// lines when the receiver is down.
type loggedExporter struct {
	sdktrace.SpanExporter
	log *zap.Logger
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.log.Warn("trace export failed; spans dropped", zap.Int("spans", len(spans)), zap.Error(err))
	}
	return nil
}
