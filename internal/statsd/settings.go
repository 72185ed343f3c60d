package statsd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Settings are the --statsd-* flags as the command line gives them:
// the flag table writes into the exported fields, Check parses them, and
// Start pushes as they ask.
type Settings struct {
	Addr       string // host:port, or with unixgram a socket's path; empty: no push
	Protocol   string // udp, tcp or unixgram
	Format     string // statsd or dogstatsd
	Tags       string // key=value,key=value
	Mogrifiers string // a JSON list of mogrifierJSON
	Interval   time.Duration

	// Parsed by Check.
	format     Format
	tags       map[string]string
	mogrifiers []Mogrifier
	globalTags []string // DogStatsD's from DD_ENV, DD_SERVICE, ...
}

// mogrifierJSON is one entry of --statsd-mogrifiers.
type mogrifierJSON struct {
	Pattern string            `json:"pattern"`
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
}

// Check checks the flags, when Addr is set, and parses what they hold;
// getenv reads Datadog's DD_* variables for DogStatsD. It reports the
// first problem, naming its flag.
func (s *Settings) Check(getenv func(string) (string, bool)) error {
	if s.Addr == "" {
		return nil
	}
	var err error
	if s.format, err = ParseFormat(s.Format); err != nil {
		return fmt.Errorf("--statsd-format: %w", err)
	}
	switch s.Protocol {
	case "udp", "tcp":
		if _, _, err := net.SplitHostPort(s.Addr); err != nil {
			return fmt.Errorf("--statsd-addr: want host:port, got %q", s.Addr)
		}
	case "unixgram":
	default:
		return fmt.Errorf("--statsd-protocol: want udp, tcp or unixgram, got %q", s.Protocol)
	}
	if s.Interval <= 0 {
		return fmt.Errorf("--statsd-flush-interval: want more than 0, got %s", s.Interval)
	}
	if s.tags, err = parseTags(s.Tags); err != nil {
		return fmt.Errorf("--statsd-tags: %w", err)
	}
	if s.format == DogStatsD {
		s.globalTags = DatadogEnvTags(getenv)
	}
	if s.Mogrifiers == "" {
		return nil
	}
	if s.format != DogStatsD {
		return fmt.Errorf("--statsd-mogrifiers: needs --statsd-format dogstatsd")
	}
	s.mogrifiers, err = parseMogrifiers(s.Mogrifiers)
	return err
}

// parseTags parses key=value,key=value.
func parseTags(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("want key=value entries, got %q", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// parseMogrifiers parses --statsd-mogrifiers.
func parseMogrifiers(s string) ([]Mogrifier, error) {
	var list []mogrifierJSON
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("--statsd-mogrifiers: want a JSON list of {\"pattern\", \"name\", \"tags\"}: %w", err)
	}
	var out []Mogrifier
	for i, m := range list {
		re, err := regexp.Compile(m.Pattern)
		if err != nil {
			return nil, fmt.Errorf("--statsd-mogrifiers[%d].pattern: %w", i, err)
		}
		if m.Pattern == "" {
			re = nil
		}
		mog := Mogrifier{Pattern: re, Name: m.Name, Tags: m.Tags}
		if err := CheckMogrifier(mog); err != nil {
			return nil, fmt.Errorf("--statsd-mogrifiers[%d]: %w", i, err)
		}
		out = append(out, mog)
	}
	return out, nil
}

// Pusher runs a Sink in a goroutine of its own, off the request path.
type Pusher struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts pushing the stats of src every s.Interval, as s asks,
// counting failed flushes in errs; nil without s.Addr. s must have
// passed Check. Stop it when done.
func (s *Settings) Start(src Source, errs prometheus.Counter, log *zap.Logger) (*Pusher, error) {
	if s.Addr == "" {
		return nil, nil
	}
	sk, err := New(Options{
		Addr:       s.Addr,
		Network:    s.Protocol,
		Format:     s.format,
		Tags:       s.tags,
		GlobalTags: s.globalTags,
		Mogrifiers: s.mogrifiers,
		Timeout:    min(s.Interval, 2*time.Second),
		Source:     src,
		Errors:     errs,
		Log:        log,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pusher{cancel: cancel}
	p.wg.Go(func() { sk.Run(ctx, s.Interval) })
	log.Info("pushing stats to statsd", zap.String("addr", s.Addr), zap.String("protocol", s.Protocol),
		zap.String("format", s.Format), zap.Duration("interval", s.Interval))
	return p, nil
}

// Stop flushes once more and stops. It is safe to call more than once,
// and on nil.
func (p *Pusher) Stop() {
	if p == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
}
