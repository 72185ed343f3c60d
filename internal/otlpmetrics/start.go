package otlpmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"go.uber.org/zap"
)

// Check checks o as the --otlp-metrics* flags set it, when Enabled, and
// settles an empty Protocol from the standard variables getenv reads.
func (o *Options) Check(getenv func(string) (string, bool)) error {
	if !o.Enabled {
		return nil
	}
	if o.Protocol == "" {
		var err error
		if o.Protocol, err = tracing.EnvProtocol(getenv, "METRICS"); err != nil {
			return err
		}
	}
	if err := errors.Join(o.flagProblems()...); err != nil {
		return fmt.Errorf("--otlp-metrics flags: %w", err)
	}
	return nil
}

// Start starts pushing the metrics of g as o asks, counting failed
// exports in errs and logging through log, and says so in the log;
// without o.Enabled it returns nil, and no exporter. o must have passed
// Check. Stop it when done.
func Start(ctx context.Context, o Options, g prometheus.Gatherer, errs prometheus.Counter, log *zap.Logger) (*Pusher, error) {
	if !o.Enabled {
		return nil, nil
	}
	o.Gatherer, o.Errors, o.Log = g, errs, log
	p, err := New(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("otlp metrics: %w", err)
	}
	endpoint := "from OTEL_EXPORTER_OTLP_* or localhost"
	if u, err := url.Parse(o.Endpoint); err == nil && o.Endpoint != "" {
		endpoint = u.Redacted()
	}
	log.Info("pushing metrics over OTLP", zap.String("protocol", o.Protocol), zap.String("endpoint", endpoint), zap.Duration("interval", o.Interval))
	return p, nil
}

// Stop exports once more, within timeout, and stops, logging a failure
// to. It is safe to call more than once, and on nil.
func (p *Pusher) Stop(timeout time.Duration) {
	if p == nil || p.stopped.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		p.log.Warn("otlp metrics shutdown: the last export may be lost", zap.Error(err))
	}
}
