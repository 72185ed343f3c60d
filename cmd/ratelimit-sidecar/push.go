package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// pushSettings are the --statsd-* flags: the metrics pushed besides the
// Prometheus ones served (docs/metrics.md).
type pushSettings struct {
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
}

func (p *pushSettings) define(fs *flag.FlagSet) {
	fs.StringVar(&p.statsdAddr, "statsd-addr", "", "`host:port` of a statsd or DogStatsD receiver (statsd_exporter, a Datadog agent) to push envoyproxy/ratelimit's stats to, under its names (docs/metrics.md); empty: none. Prometheus metrics are served either way")
	fs.StringVar(&p.statsdProtocol, "statsd-protocol", "udp", "udp or tcp (envoyproxy/ratelimit's statsd client's)")
	fs.StringVar(&p.statsdFormat, "statsd-format", "statsd", "statsd (tags in the name, as .__key=value) or dogstatsd (tags as |#key:value)")
	fs.StringVar(&p.statsdTags, "statsd-tags", "", "tags of every stat pushed: key=value,key=value (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.StringVar(&p.statsdMogrifiers, "statsd-mogrifiers", "", `with --statsd-format dogstatsd, a JSON list of renamings, the first that matches a stat's name applying: [{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"domain":"$1","descriptor":"$2"}}] (envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_*)`)
	fs.DurationVar(&p.statsdInterval, "statsd-flush-interval", 10*time.Second, "how often stats are pushed to --statsd-addr")
}

// mogrifierJSON is one entry of --statsd-mogrifiers.
type mogrifierJSON struct {
	Pattern string            `json:"pattern"`
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
}

// check checks the flags and parses what they hold.
func (p *pushSettings) check() error {
	if p.statsdAddr == "" {
		return nil
	}
	var err error
	if p.format, err = statsd.ParseFormat(p.statsdFormat); err != nil {
		return fmt.Errorf("--statsd-format: %w", err)
	}
	switch p.statsdProtocol {
	case "udp", "tcp":
	default:
		return fmt.Errorf("--statsd-protocol: want udp or tcp, got %q", p.statsdProtocol)
	}
	if p.statsdInterval <= 0 {
		return fmt.Errorf("--statsd-flush-interval: want more than 0, got %s", p.statsdInterval)
	}
	if p.tags, err = parseTags(p.statsdTags); err != nil {
		return fmt.Errorf("--statsd-tags: %w", err)
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
}

// startPush starts what c asks to push metrics to; it returns a pusher
// to stop even when nothing is pushed.
func startPush(c *settings, log *zap.Logger, m *metrics.Metrics, rules func() *limits.Ruleset) (*pusher, error) {
	p := &pusher{cancel: func() {}}
	if c.push.statsdAddr == "" {
		return p, nil
	}
	sk, err := statsd.New(statsd.Options{
		Addr:       c.push.statsdAddr,
		Network:    c.push.statsdProtocol,
		Format:     c.push.format,
		Tags:       c.push.tags,
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

// stop pushes once more and stops. It is safe to call more than once.
func (p *pusher) stop() {
	p.cancel()
	p.wg.Wait()
}
