package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// ruleSource is where the rules in use come from: rule files
// (*config.Reloader) or an xDS server (*xdsRules). Watch keeps them up to
// date until its context ends; Reload answers SIGHUP; Ready is closed
// once the source has its first rules (rule files have them from the
// start), and Awaiting says what it waits for until then.
type ruleSource interface {
	Status() config.ReloadStatus
	Watch(ctx context.Context) error
	Reload() (bool, error)
	Ready() <-chan struct{}
	Awaiting() string
}

// xdsSettings are the flags of --config-type xds, defined with the others
// in flags.go, and the reconnect waits and message bound that only the
// reference's XDS_CLIENT_* set (setFlagless). Their defaults are
// envoyproxy/ratelimit's for CONFIG_GRPC_XDS_* and XDS_CLIENT_BACKOFF_*.
type xdsSettings struct {
	configType    string
	server        string
	nodeID        string
	nodeMetadata  string
	headers       string
	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	backoff       struct {
		initial, max time.Duration
		jitter       float64
	}
	maxMessageBytes int
	forceStart      bool
	overlay         string
	sources         sourceList // --xds-source: more servers, beside the first or the rule files

	// What finish derives.
	enabled  bool // --config-type xds
	metadata *structpb.Struct
	header   map[string]string
}

// minXDSBackoff is the shortest first reconnect wait taken.
const minXDSBackoff = 10 * time.Millisecond

// finish checks the xDS flags and parses the metadata and headers.
func (x *xdsSettings) finish() error {
	switch strings.ToLower(x.configType) {
	case "file":
	case "xds", "grpc_xds_sotw":
		x.enabled = true
	default:
		return fmt.Errorf("--config-type: want file or xds, got %q", x.configType)
	}
	if x.forceStart && !x.enabled && len(x.sources) == 0 {
		return fmt.Errorf("--force-start-without-rules: only with --config-type xds or --xds-source")
	}
	if err := x.sources.check(); err != nil {
		return err
	}
	if x.overlay != "" && !x.enabled {
		return fmt.Errorf("--xds-overlay: only with --config-type xds (rule files say it all themselves)")
	}
	// A wait below minXDSBackoff would let a client hammer a server
	// that refuses it. The mapping of XDS_CLIENT_BACKOFF_* keeps the
	// longest wait at least the first, and the jitter and message size
	// in range.
	if x.backoff.initial < minXDSBackoff {
		return fmt.Errorf("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: want %v or more, got %v", minXDSBackoff, x.backoff.initial)
	}
	x.tls = x.tls || x.tlsCA != "" || x.tlsCert != "" || x.tlsKey != "" || x.tlsServerName != ""
	var err error
	if x.metadata, err = xds.ParseNodeMetadata(x.nodeMetadata); err != nil {
		return fmt.Errorf("--xds-node-metadata: %w", err)
	}
	if x.header, err = xds.ParseHeaders(x.headers); err != nil {
		return fmt.Errorf("--xds-headers: %w", err)
	}
	return nil
}

// startRules returns the rules to start with: the rule files' (read
// with opts), or none for --config-type xds, whose rules arrive with its
// first push: that is starting without rules on purpose.
func startRules(c *settings, opts config.Options) (*limits.Ruleset, error) {
	if c.xds.enabled {
		return limits.NewRuleset(nil, nil, config.Checksum(nil)), nil
	}
	return config.Load(c.configPath, opts)
}

// rulesFrom returns the rule source of c: its rule files' reloader or
// an xDS client applying pushes to engine, reported to onApply as reloads
// are; with --xds-source, those and every more xDS server, combined
// (sources.go).
func rulesFrom(c *settings, opts config.Options, engine *limits.Engine, log *zap.Logger, m *metrics.Metrics, onApply func(config.ReloadStatus, error)) (ruleSource, error) {
	if len(c.xds.sources) > 0 {
		return combinedRules(c, opts, engine, log, m, onApply)
	}
	if !c.xds.enabled {
		return newReloader(c, opts, engine, log, onApply), nil
	}
	x, err := newXDSRules(c, engine, log, onApply)
	if err != nil {
		return nil, err
	}
	m.XDS(x.metricsState)
	return x, nil
}

// newReloader returns the reloader of c's rule files, keeping target's
// rules theirs.
func newReloader(c *settings, opts config.Options, target config.Target, log *zap.Logger, onApply func(config.ReloadStatus, error)) *config.Reloader {
	return config.NewReloader(c.configPath, target, log, config.ReloaderOptions{
		Options:  opts,
		Debounce: c.reloadDebounce,
		OnReload: onApply,
	})
}

// xdsOptions are the options of c's first xDS server (--xds-server).
func xdsOptions(c *settings, onApply func(config.ReloadStatus, error)) xds.Options {
	o := xds.Options{
		Server:            c.xds.server,
		NodeID:            c.xds.nodeID,
		NodeMetadata:      c.xds.metadata,
		Headers:           c.xds.header,
		BackoffInitial:    c.xds.backoff.initial,
		BackoffMax:        c.xds.backoff.max,
		BackoffJitter:     c.xds.backoff.jitter,
		MaxMessageBytes:   c.xds.maxMessageBytes,
		Rules:             config.Options{MergeDomains: c.mergeDomains, CalendarMonths: c.calendarMonths},
		AllowEmpty:        c.allowEmptyRules,
		StartWithoutRules: c.xds.forceStart,
		OnApply:           onApply,
		OverlayPath:       c.xds.overlay,
		OverlayDebounce:   c.reloadDebounce,
	}
	if c.xds.tls {
		o.TLS = &xds.TLSOptions{CAFile: c.xds.tlsCA, CertFile: c.xds.tlsCert, KeyFile: c.xds.tlsKey, ServerName: c.xds.tlsServerName}
	}
	return o
}

// newXDSRules returns the client of c's first xDS server, keeping
// target's rules its pushes'.
func newXDSRules(c *settings, target xds.Target, log *zap.Logger, onApply func(config.ReloadStatus, error)) (*xdsRules, error) {
	client, err := xds.New(target, log, xdsOptions(c, onApply))
	if err != nil {
		return nil, fmt.Errorf("--config-type xds: %w", err)
	}
	return &xdsRules{Client: client, log: log, server: c.xds.server, overlay: c.xds.overlay != ""}, nil
}

// xdsRules is an xDS client as a rule source.
type xdsRules struct {
	*xds.Client
	log     *zap.Logger
	server  string
	overlay bool // --xds-overlay: SIGHUP reads it again
}

// metricsState is the client's state for the metrics.
func (x *xdsRules) metricsState() metrics.XDSState {
	st := x.State()
	return metrics.XDSState{Connected: st.Connected, LastPush: st.LastPush, Applied: st.Applied, OverlayUnmatched: st.OverlayUnmatched}
}

// Reload answers SIGHUP: the rules are the server's last push, and only
// the overlay, if any, is read again.
func (x *xdsRules) Reload() (bool, error) {
	if x.overlay {
		return x.ReloadOverlay()
	}
	x.log.Info("SIGHUP ignored: the rules come from the xDS server", zap.String("server", x.server))
	return false, nil
}

// pending returns a channel closed once src has rules, and the health
// answer until then: what it waits for now, since several sources get
// their rules one by one.
func pending(src ruleSource) (<-chan struct{}, func() string) {
	return src.Ready(), func() string { return "waiting for " + src.Awaiting() }
}
