package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlpmetrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// pushSettings are the --statsd-* and --otlp-metrics* flags: the metrics
// pushed besides the Prometheus ones served (docs/metrics.md).
type pushSettings struct {
	otlp         bool
	otlpProtocol string
	otlpEndpoint string
	otlpInterval time.Duration
	otlpTLSCA    string
	otlpTLSCert  string
	otlpTLSKey   string

	statsdAddr       string
	statsdProtocol   string
	statsdFormat     string
	statsdTags       string
	statsdMogrifiers string
	statsdInterval   time.Duration

	// Parsed by check.
	format     statsd.Format
	tags       map[string]string
	mogrifiers []statsd.Mogrifier
	globalTags []string // DogStatsD's from DD_ENV, DD_SERVICE, ...
}

func (p *pushSettings) define(fs *flag.FlagSet) {
	fs.StringVar(&p.statsdAddr, "statsd-addr", "", "`host:port` of a statsd or DogStatsD receiver (statsd_exporter, a Datadog agent), or with --statsd-protocol unixgram a socket's path, to push envoyproxy/ratelimit's stats to, under its names (docs/metrics.md); empty: none. Prometheus metrics are served either way")
	fs.StringVar(&p.statsdProtocol, "statsd-protocol", "udp", "udp, tcp (envoyproxy/ratelimit's statsd client's) or unixgram (a Datadog agent's socket)")
	fs.StringVar(&p.statsdFormat, "statsd-format", "statsd", "statsd (tags in the name, as .__key=value) or dogstatsd (tags as |#key:value)")
	fs.StringVar(&p.statsdTags, "statsd-tags", "", "tags of every stat pushed: key=value,key=value (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.StringVar(&p.statsdMogrifiers, "statsd-mogrifiers", "", `with --statsd-format dogstatsd, a JSON list of renamings, the first that matches a stat's name applying: [{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"domain":"$1","descriptor":"$2"}}] (envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_*)`)
	fs.DurationVar(&p.statsdInterval, "statsd-flush-interval", 10*time.Second, "how often stats are pushed to --statsd-addr")
	fs.BoolVar(&p.otlp, "otlp-metrics", false, "push our Prometheus metrics, names and labels as they are, over OTLP through the OpenTelemetry SDK (docs/metrics.md)")
	fs.StringVar(&p.otlpProtocol, "otlp-metrics-protocol", "", "OTLP `protocol`: grpc or http (protobuf bodies); default: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http")
	fs.StringVar(&p.otlpEndpoint, "otlp-metrics-endpoint", "", "OTLP receiver `URL`: http:// (plaintext) or https://, such as http://otel-collector:4318 (http adds /v1/metrics to a URL without a path); empty: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost")
	fs.DurationVar(&p.otlpInterval, "otlp-metrics-interval", 0, "time between OTLP exports (0: OTEL_METRIC_EXPORT_INTERVAL, else 60s)")
	fs.StringVar(&p.otlpTLSCA, "otlp-metrics-tls-ca", "", "PEM file of CAs for the OTLP receiver's certificate (default: system roots); needs an https:// endpoint")
	fs.StringVar(&p.otlpTLSCert, "otlp-metrics-tls-cert", "", "PEM client certificate for the OTLP receiver (mutual TLS)")
	fs.StringVar(&p.otlpTLSKey, "otlp-metrics-tls-key", "", "PEM key of --otlp-metrics-tls-cert")
}

// mogrifierJSON is one entry of --statsd-mogrifiers.
type mogrifierJSON struct {
	Pattern string            `json:"pattern"`
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
}

// check checks the flags and parses what they hold.
func (p *pushSettings) check(getenv func(string) (string, bool)) error {
	if err := p.checkOTLP(getenv); err != nil {
		return err
	}
	if p.statsdAddr == "" {
		return nil
	}
	var err error
	if p.format, err = statsd.ParseFormat(p.statsdFormat); err != nil {
		return fmt.Errorf("--statsd-format: %w", err)
	}
	switch p.statsdProtocol {
	case "udp", "tcp":
		if _, _, err := net.SplitHostPort(p.statsdAddr); err != nil {
			return fmt.Errorf("--statsd-addr: want host:port, got %q", p.statsdAddr)
		}
	case "unixgram":
	default:
		return fmt.Errorf("--statsd-protocol: want udp, tcp or unixgram, got %q", p.statsdProtocol)
	}
	if p.statsdInterval <= 0 {
		return fmt.Errorf("--statsd-flush-interval: want more than 0, got %s", p.statsdInterval)
	}
	if p.tags, err = parseTags(p.statsdTags); err != nil {
		return fmt.Errorf("--statsd-tags: %w", err)
	}
	if p.format == statsd.DogStatsD {
		p.globalTags = statsd.DatadogEnvTags(getenv)
	}
	if p.statsdMogrifiers == "" {
		return nil
	}
	if p.format != statsd.DogStatsD {
		return fmt.Errorf("--statsd-mogrifiers: needs --statsd-format dogstatsd")
	}
	var list []mogrifierJSON
	dec := json.NewDecoder(strings.NewReader(p.statsdMogrifiers))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		return fmt.Errorf("--statsd-mogrifiers: want a JSON list of {\"pattern\", \"name\", \"tags\"}: %w", err)
	}
	for i, m := range list {
		re, err := regexp.Compile(m.Pattern)
		if err != nil {
			return fmt.Errorf("--statsd-mogrifiers[%d].pattern: %w", i, err)
		}
		if m.Pattern == "" {
			re = nil
		}
		mog := statsd.Mogrifier{Pattern: re, Name: m.Name, Tags: m.Tags}
		if err := statsd.CheckMogrifier(mog); err != nil {
			return fmt.Errorf("--statsd-mogrifiers[%d]: %w", i, err)
		}
		p.mogrifiers = append(p.mogrifiers, mog)
	}
	return nil
}

// checkOTLP checks the --otlp-metrics* flags, when on, and settles the
// protocol.
func (p *pushSettings) checkOTLP(getenv func(string) (string, bool)) error {
	if !p.otlp {
		return nil
	}
	if p.otlpProtocol == "" {
		var err error
		if p.otlpProtocol, err = otlpEnvProtocol(getenv); err != nil {
			return err
		}
	}
	o := p.otlpOptions()
	o.Gatherer = prometheus.NewRegistry() // checked here for the flags' sake
	if err := o.Validate(); err != nil {
		return fmt.Errorf("--otlp-metrics flags: %w", err)
	}
	return nil
}

// otlpEnvProtocol is the protocol the standard variables ask for, as the
// OpenTelemetry specification names it; http by default.
func otlpEnvProtocol(getenv func(string) (string, bool)) (string, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v, ok := getenv(name)
		if !ok || v == "" {
			continue
		}
		switch v {
		case "grpc":
			return otlpmetrics.ProtocolGRPC, nil
		case "http/protobuf":
			return otlpmetrics.ProtocolHTTP, nil
		}
		return "", fmt.Errorf("%s: want grpc or http/protobuf, got %q", name, v)
	}
	return otlpmetrics.ProtocolHTTP, nil
}

func (p *pushSettings) otlpOptions() otlpmetrics.Options {
	return otlpmetrics.Options{Protocol: p.otlpProtocol, Endpoint: p.otlpEndpoint, Interval: p.otlpInterval,
		TLSCA: p.otlpTLSCA, TLSCert: p.otlpTLSCert, TLSKey: p.otlpTLSKey, ServiceVersion: version}
}

// parseTags parses key=value,key=value.
func parseTags(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("want key=value entries, got %q", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// pusher runs the sinks that push metrics, each in a goroutine of its
// own, off the request path.
type pusher struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	otlp   *otlpmetrics.Pusher
	log    *zap.Logger
}

// startPush starts what c asks to push metrics to; it returns a pusher
// to stop even when nothing is pushed.
func startPush(ctx context.Context, c *settings, log *zap.Logger, m *metrics.Metrics, rules func() *limits.Ruleset) (*pusher, error) {
	p := &pusher{cancel: func() {}, log: log}
	if c.push.otlp {
		o := c.push.otlpOptions()
		o.Gatherer, o.Errors, o.Log = m.Registry, m.PushErrors("otlp"), log
		var err error
		if p.otlp, err = otlpmetrics.New(ctx, o); err != nil {
			return nil, fmt.Errorf("otlp metrics: %w", err)
		}
		endpoint := "from OTEL_EXPORTER_OTLP_* or localhost"
		if u, err := url.Parse(o.Endpoint); err == nil && o.Endpoint != "" {
			endpoint = u.Redacted()
		}
		log.Info("pushing metrics over OTLP", zap.String("protocol", o.Protocol), zap.String("endpoint", endpoint), zap.Duration("interval", o.Interval))
	}
	if c.push.statsdAddr == "" {
		return p, nil
	}
	sk, err := statsd.New(statsd.Options{
		Addr:       c.push.statsdAddr,
		Network:    c.push.statsdProtocol,
		Format:     c.push.format,
		Tags:       c.push.tags,
		GlobalTags: c.push.globalTags,
		Mogrifiers: c.push.mogrifiers,
		Timeout:    min(c.push.statsdInterval, 2*time.Second),
		Source:     metrics.NewReference(m.Registry, rules),
		Errors:     m.PushErrors("statsd"),
		Log:        log,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Go(func() { sk.Run(ctx, c.push.statsdInterval) })
	log.Info("pushing stats to statsd", zap.String("addr", c.push.statsdAddr), zap.String("protocol", c.push.statsdProtocol),
		zap.String("format", c.push.statsdFormat), zap.Duration("interval", c.push.statsdInterval))
	return p, nil
}

// stop pushes once more and stops, the OTLP export within timeout. It
// is safe to call more than once.
func (p *pusher) stop(timeout time.Duration) {
	p.cancel()
	p.wg.Wait()
	if p.otlp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.otlp.Shutdown(ctx); err != nil {
			p.log.Warn("otlp metrics shutdown: the last export may be lost", zap.Error(err))
		}
		p.otlp = nil
	}
}
