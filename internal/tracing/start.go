package tracing

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.uber.org/zap"
)

// flagNames are the flags that set the fields Validate names.
var flagNames = map[string]string{
	"protocol":      "--tracing-protocol",
	"endpoint":      "--tracing-endpoint",
	"sampling rate": "--tracing-sampling-rate",
}

// Check checks o as the --tracing* flags set it, when Enabled, and
// settles an empty Protocol from the standard variables getenv reads. It
// reports the first problem, naming its flag.
func (o *Options) Check(getenv func(string) (string, bool)) error {
	if !o.Enabled {
		return nil
	}
	if o.Protocol == "" {
		p, err := EnvProtocol(getenv, "TRACES")
		if err != nil {
			return err
		}
		o.Protocol = p
	}
	if ps := o.problems(); len(ps) > 0 {
		return fmt.Errorf("%s: %w", flagNames[ps[0].field], ps[0].err)
	}
	return nil
}

// EnvProtocol is the OTLP protocol the standard variables ask for a
// signal (TRACES, METRICS), as the OpenTelemetry specification names
// them: OTEL_EXPORTER_OTLP_<signal>_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL; http by default, as envoyproxy/ratelimit's
// TRACING_EXPORTER_PROTOCOL.
func EnvProtocol(getenv func(string) (string, bool), signal string) (string, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v, ok := getenv(name)
		if !ok || v == "" {
			continue
		}
		switch v {
		case "grpc":
			return ProtocolGRPC, nil
		case "http/protobuf":
			return ProtocolHTTP, nil
		}
		return "", fmt.Errorf("%s: want grpc or http/protobuf, got %q", name, v)
	}
	return ProtocolHTTP, nil
}

// Start starts the tracer provider o asks for, logging through log, and
// says so in the log; without o.Enabled it returns nil, and no exporter.
// o must have passed Check. Stop it when done.
func Start(ctx context.Context, o Options, log *zap.Logger) (*Provider, error) {
	if !o.Enabled {
		return nil, nil
	}
	o.Log = log
	p, err := New(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	endpoint := "from OTEL_EXPORTER_OTLP_* or localhost"
	if u, err := url.Parse(o.Endpoint); err == nil && o.Endpoint != "" {
		endpoint = u.Redacted()
	}
	log.Info("tracing on", zap.String("protocol", o.Protocol), zap.String("endpoint", endpoint),
		zap.String("service_name", o.ServiceName), zap.Float64("sampling_rate", o.SamplingRate))
	return p, nil
}

// Stop sends the spans still queued, within timeout, and stops the
// exporter, logging a failure to. It is safe to call more than once, and
// on nil.
func (p *Provider) Stop(timeout time.Duration) {
	if p == nil || p.stopped.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		p.log.Warn("tracing shutdown: spans may be lost", zap.Error(err))
	}
}
