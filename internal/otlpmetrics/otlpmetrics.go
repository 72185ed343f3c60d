// Package otlpmetrics pushes the sidecar's Prometheus metrics over OTLP,
// through the OpenTelemetry SDK: a periodic reader whose producer is the
// OpenTelemetry bridge of the Prometheus registry, so every metric keeps
// its name and labels, and counters and histograms stay cumulative.
//
// The registry is read in the reader's own goroutine at each export, so
// the decisions pay nothing for the push. An export is bounded by a
// timeout and not retried (the next one carries the running totals
// anyway); a failed one counts in Options.Errors. The exporter reads the
// standard OTEL_EXPORTER_OTLP_* variables (headers, compression,
// certificates) itself; Options win over them.
package otlpmetrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
)

// The exporter protocols.
const (
	ProtocolGRPC = "grpc" // OTLP over gRPC, by default to localhost:4317
	ProtocolHTTP = "http" // OTLP over HTTP with protobuf bodies, by default to localhost:4318
)

// metricsPath is where an OTLP/HTTP receiver takes metrics, below a base
// URL.
const metricsPath = "/v1/metrics"

// DefaultServiceName is service.name unless the environment gives one.
const DefaultServiceName = "ratelimit-sidecar"

// Options describes a Pusher. The --otlp-metrics* flags write into
// Enabled, Protocol, Endpoint, Interval and the TLS files.
type Options struct {
	// Enabled is --otlp-metrics: Start starts nothing without it. New
	// ignores it.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Endpoint is the receiver's URL, http:// (plaintext) or https://.
	// Over HTTP a URL without a path gets /v1/metrics. Empty: the
	// exporter reads OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, else sends to localhost.
	Endpoint string
	// Interval is the time between exports; 0: OTEL_METRIC_EXPORT_INTERVAL,
	// else 60s.
	Interval time.Duration
	// TLSCA, TLSCert and TLSKey are PEM files: the CAs of the receiver's
	// certificate (default: the system's), and a client certificate and
	// its key (mutual TLS). They need an https:// Endpoint.
	TLSCA, TLSCert, TLSKey string
	// ServiceVersion is the resource's service.version; empty is left out.
	ServiceVersion string
	// Gatherer is the registry whose metrics are pushed.
	Gatherer prometheus.Gatherer
	// Errors counts failed exports. Nil: not counted.
	Errors prometheus.Counter
	// Log gets a warning when exports start failing, a line when they
	// succeed again, and Stop's failure to export. Nil logs nothing.
	Log *zap.Logger
}

// Validate reports what is wrong with o, every problem at once.
func (o *Options) Validate() error {
	errs := o.flagProblems()
	if o.Gatherer == nil {
		errs = append(errs, errors.New("no gatherer"))
	}
	return errors.Join(errs...)
}

// flagProblems are what is wrong with the fields the flags set.
func (o *Options) flagProblems() []error {
	var errs []error
	switch o.Protocol {
	case ProtocolGRPC, ProtocolHTTP:
	default:
		errs = append(errs, fmt.Errorf("protocol: want grpc or http, got %q", o.Protocol))
	}
	if o.Endpoint != "" {
		u, err := tracing.EndpointURL(o.Endpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("endpoint: %w", err))
		case u.Scheme == "http" && (o.TLSCA != "" || o.TLSCert != ""):
			errs = append(errs, fmt.Errorf("endpoint: TLS files need an https:// URL, got %q", o.Endpoint))
		}
	}
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval: want 0 (the SDK's) or more, got %s", o.Interval))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		errs = append(errs, errors.New("tls: a client certificate needs its key, and a key its certificate"))
	}
	return errs
}

// CheckEndpoint reports what is wrong with an Options.Endpoint: it is
// taken as a trace exporter's is (tracing.EndpointURL).
func CheckEndpoint(s string) error { return tracing.CheckEndpoint(s) }

// Pusher exports the registry's metrics periodically. It is safe for
// concurrent use.
type Pusher struct {
	mp  *sdkmetric.MeterProvider
	log *zap.Logger // Options.Log, or a no-op logger

	stopped atomic.Bool // Stop was called
}

// New starts a Pusher as o describes. Its exporter connects when it first
// sends. Shut it down when done.
func New(ctx context.Context, o Options) (*Pusher, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("otlp metrics exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithAttributes(versionAttrs(o.ServiceVersion)...))
	if err != nil {
		return nil, fmt.Errorf("resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	if res, err = resource.Merge(resource.NewSchemaless(attribute.String("service.name", DefaultServiceName)), res); err != nil {
		return nil, err
	}
	readerOpts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(o.Gatherer)))}
	if o.Interval > 0 {
		readerOpts = append(readerOpts, sdkmetric.WithInterval(o.Interval), sdkmetric.WithTimeout(exportTimeout(o.Interval)))
	}
	reader := sdkmetric.NewPeriodicReader(&countedExporter{Exporter: exp, errors: o.Errors, log: o.Log}, readerOpts...)
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Pusher{mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res)), log: log}, nil
}

// exportTimeout bounds an export: within its interval, and 10s at most.
func exportTimeout(interval time.Duration) time.Duration { return min(interval, 10*time.Second) }

func versionAttrs(v string) []attribute.KeyValue {
	if v == "" {
		return nil
	}
	return []attribute.KeyValue{attribute.String("service.version", v)}
}

// ForceFlush exports now, within ctx.
func (p *Pusher) ForceFlush(ctx context.Context) error { return p.mp.ForceFlush(ctx) }

// Shutdown exports once more, within ctx, and stops.
func (p *Pusher) Shutdown(ctx context.Context) error { return p.mp.Shutdown(ctx) }

func newExporter(ctx context.Context, o Options) (sdkmetric.Exporter, error) {
	tlsConf, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	var u *url.URL
	if o.Endpoint != "" {
		u, _ = tracing.EndpointURL(o.Endpoint) // checked by Validate
	}
	timeout := exportTimeout(max(o.Interval, 10*time.Second))
	if o.Protocol == ProtocolGRPC {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig{Enabled: false}), otlpmetricgrpc.WithTimeout(timeout)}
		if u != nil {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(u.String()))
		}
		if tlsConf != nil {
			opts = append(opts, otlpmetricgrpc.WithTLSCredentials(credentials.NewTLS(tlsConf)))
		}
		return otlpmetricgrpc.New(ctx, opts...)
	}
	opts := []otlpmetrichttp.Option{otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}), otlpmetrichttp.WithTimeout(timeout)}
	if u != nil {
		if strings.TrimSuffix(u.Path, "/") == "" {
			u.Path = metricsPath
		}
		opts = append(opts, otlpmetrichttp.WithEndpointURL(u.String()))
	}
	if tlsConf != nil {
		opts = append(opts, otlpmetrichttp.WithTLSClientConfig(tlsConf))
	}
	return otlpmetrichttp.New(ctx, opts...)
}

// tlsConfig is the TLS the files of o ask for; nil when they name none.
func tlsConfig(o Options) (*tls.Config, error) {
	if o.TLSCA == "" && o.TLSCert == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca: no PEM certificate in %s", o.TLSCA)
		}
		conf.RootCAs = pool
	}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// countedExporter counts and logs the exports that failed, instead of
// handing the error to OpenTelemetry's global error handler, which would
// print it to stderr in a format of its own.
type countedExporter struct {
	sdkmetric.Exporter
	errors  prometheus.Counter
	log     *zap.Logger
	failing bool // the last export failed; Export is called from one goroutine at a time
}

func (e *countedExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := e.Exporter.Export(ctx, rm)
	if err != nil && e.errors != nil {
		e.errors.Inc()
	}
	if e.log != nil {
		switch {
		case err != nil && !e.failing:
			e.log.Warn("otlp metrics export failed; the next export carries the totals", zap.Error(err))
		case err == nil && e.failing:
			e.log.Info("otlp metrics exports succeed again")
		}
	}
	e.failing = err != nil
	return nil // counted and logged: not for the global error handler
}
