package main

import (
	"context"
	"flag"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
)

// tracingSettings are the --tracing* flags: OpenTelemetry spans of the
// calls, exported over OTLP (docs/tracing.md).
type tracingSettings struct {
	enabled      bool
	protocol     string
	endpoint     string
	samplingRate float64
	// The resource's service attributes, which only the reference's
	// TRACING_SERVICE_* set (setFlagless); empty: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, else tracing's defaults.
	serviceName, serviceNamespace, serviceInstanceID string
}

func (t *tracingSettings) define(fs *flag.FlagSet) {
	fs.BoolVar(&t.enabled, "tracing", false, "send an OpenTelemetry span of each ShouldRateLimit call, and of its Redis round trip, to an OTLP receiver (docs/tracing.md)")
	fs.StringVar(&t.protocol, "tracing-protocol", "", "OTLP `protocol`: grpc or http (protobuf bodies); default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http")
	fs.StringVar(&t.endpoint, "tracing-endpoint", "", "OTLP receiver `URL`, http:// or https://, such as http://otel-collector:4318 (http adds /v1/traces to a URL without a path); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost")
	fs.Float64Var(&t.samplingRate, "tracing-sampling-rate", 1, "share of calls traced, from 0 to 1, among those whose caller sent no trace context; a call whose caller did is traced exactly when the caller's trace is sampled")
}

// check checks the flags, when tracing is on, and settles the protocol.
func (t *tracingSettings) check(getenv func(string) (string, bool)) error {
	if !t.enabled {
		return nil
	}
	if t.protocol == "" {
		p, err := envProtocol(getenv)
		if err != nil {
			return err
		}
		t.protocol = p
	}
	switch t.protocol {
	case tracing.ProtocolGRPC, tracing.ProtocolHTTP:
	default:
		return fmt.Errorf("--tracing-protocol: want grpc or http, got %q", t.protocol)
	}
	if t.endpoint != "" {
		if err := tracing.CheckEndpoint(t.endpoint); err != nil {
			return fmt.Errorf("--tracing-endpoint: %w", err)
		}
	}
	if !(t.samplingRate >= 0 && t.samplingRate <= 1) { // NaN too
		return fmt.Errorf("--tracing-sampling-rate: want a number from 0 to 1, got %v", t.samplingRate)
	}
	return nil
}

// envProtocol is the protocol the standard variables ask for, as the
// OpenTelemetry specification names it; http by default, as
// envoyproxy/ratelimit's TRACING_EXPORTER_PROTOCOL.
func envProtocol(getenv func(string) (string, bool)) (string, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v, ok := getenv(name)
		if !ok || v == "" {
			continue
		}
		switch v {
		case "grpc":
			return tracing.ProtocolGRPC, nil
		case "http/protobuf":
			return tracing.ProtocolHTTP, nil
		}
		return "", fmt.Errorf("%s: want grpc or http/protobuf, got %q", name, v)
	}
	return tracing.ProtocolHTTP, nil
}

func (t *tracingSettings) options() tracing.Options {
	return tracing.Options{
		Protocol:          t.protocol,
		Endpoint:          t.endpoint,
		ServiceName:       t.serviceName,
		ServiceNamespace:  t.serviceNamespace,
		ServiceInstanceID: t.serviceInstanceID,
		ServiceVersion:    version,
		SamplingRate:      t.samplingRate,
	}
}

// sidecarTracing is the tracer provider that --tracing starts, or nil.
type sidecarTracing struct {
	p   *tracing.Provider
	log *zap.Logger
}

// startTracing starts the tracer provider that c asks for; nil, and no
// exporter, without --tracing.
func startTracing(ctx context.Context, c *settings, log *zap.Logger) (*sidecarTracing, error) {
	if !c.tracing.enabled {
		return nil, nil
	}
	o := c.tracing.options()
	o.Log = log
	p, err := tracing.New(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	endpoint := "from OTEL_EXPORTER_OTLP_* or localhost"
	if u, err := url.Parse(o.Endpoint); err == nil && o.Endpoint != "" {
		endpoint = u.Redacted()
	}
	log.Info("tracing on", zap.String("protocol", o.Protocol), zap.String("endpoint", endpoint),
		zap.String("service_name", o.ServiceName), zap.Float64("sampling_rate", o.SamplingRate))
	return &sidecarTracing{p: p, log: log}, nil
}

// rls returns what the RLS server traces with, the backend being store;
// nil without --tracing.
func (t *sidecarTracing) rls(store string) *envoy.Tracing {
	if t == nil {
		return nil
	}
	return &envoy.Tracing{Tracer: t.p.Tracer("github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"), Propagator: t.p.Propagator(), Store: store}
}

// rlqs returns the tracer of the RLQS server; nil without --tracing.
func (t *sidecarTracing) rlqs() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.p.Tracer("github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs")
}

// shutdown sends the spans still queued, within timeout, and stops the
// exporter. It is safe to call more than once, and on nil.
func (t *sidecarTracing) shutdown(timeout time.Duration) {
	if t == nil || t.p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := t.p.Shutdown(ctx); err != nil {
		t.log.Warn("tracing shutdown: spans may be lost", zap.Error(err))
	}
	t.p = nil
}
