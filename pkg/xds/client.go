// Package xds takes the rules from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW and as Envoy
// Gateway serves them: one aggregated (ADS), state-of-the-world stream of
// RateLimitConfig resources, through go-control-plane's own SotW client.
//
// Every push is the whole rule set. Each resource is rendered as the rule
// document it stands for and the push is checked exactly as rule files
// are (config.ParseGenerated). A good push replaces the engine's rules and
// is ACKed; a bad one is NACKed with every problem, each naming the
// resource, the path of the field and the reason, in error_detail, and
// the rules in use keep deciding with their counters, which do not depend
// on where rules came from. An overlay file (Options.OverlayPath) gives
// every push the fields a RateLimitConfig cannot carry.
package xds

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// The reconnect backoff's defaults: envoyproxy/ratelimit's
// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, _MAX_INTERVAL and _RANDOM_FACTOR.
const (
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 60 * time.Second
	DefaultBackoffJitter  = 0.5
)

const (
	// quietAfter is how long an open stream may carry no push before a
	// warning says so: a server with no snapshot for the node ID sends
	// nothing, and says nothing either.
	quietAfter = 30 * time.Second
	// maxErrorDetail bounds a NACK's message; the log has every problem.
	maxErrorDetail = 16 << 10
	// Keepalive pings find a server that went away without closing the
	// connection. grpc-go servers, go-control-plane's among them, by
	// default close connections that ping more often than every 5
	// minutes.
	keepaliveTime    = 5 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

// ErrNoResources is the error of a push that holds no RateLimitConfig at
// all, unless Options.AllowEmpty: applied, it would switch every limit
// off.
var ErrNoResources = errors.New("the push holds no RateLimitConfig resource, which would leave no rules (allow it with --allow-empty-rules)")

// Options configures a Client.
type Options struct {
	// Server is the management server's gRPC target, such as
	// envoy-gateway:18001. Required.
	Server string
	// NodeID names the sidecar to the server, whose snapshot cache keys
	// its snapshots by it (Envoy Gateway: envoy-ratelimit).
	NodeID string
	// NodeMetadata is sent with the node; nil sends none.
	NodeMetadata *structpb.Struct
	// Headers are sent as gRPC metadata when the stream opens.
	Headers map[string]string
	// TLS, if set, secures the connection; nil connects in plaintext.
	TLS *TLSOptions
	// BackoffInitial, BackoffMax and BackoffJitter space out reconnects,
	// and NACKs of a rejected push that the server sends again
	// unchanged: BackoffInitial, then twice the last wait up to
	// BackoffMax, each spread by ±BackoffJitter (0 to 1) of itself. A
	// stream that carried a push starts over at BackoffInitial. Zero
	// durations take the defaults.
	BackoffInitial, BackoffMax time.Duration
	BackoffJitter              float64
	// MaxMessageBytes bounds a push; 0 keeps gRPC's default, 4 MiB.
	MaxMessageBytes int
	// Rules is how the pushed resources combine, as rule files do:
	// several resources of one domain need MergeDomains.
	Rules config.Options
	// AllowEmpty accepts a push of no resources, which leaves no rules:
	// every request is then allowed. Without it such a push is refused
	// (ErrNoResources).
	AllowEmpty bool
	// StartWithoutRules makes the client ready at once, as
	// envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG does: the
	// engine decides with the rules it holds (none, at start) until the
	// first good push. Without it Ready is closed by the first good push.
	StartWithoutRules bool
	// OnApply, if set, is called after every push that changed the rules
	// in use, was rejected, or restored the rules in use after a
	// rejection, with the new status and the push's error. A rejected
	// push that the server sends again unchanged is not reported again.
	// Overlay readings that change the rules or are refused are reported
	// too.
	OnApply func(config.ReloadStatus, error)
	// OverlayPath, if set, names an overlay file (config.Overlay) applied
	// to every push: it gives pushed rules the fields a RateLimitConfig
	// cannot carry. New reads it, and fails if it is bad; Watch reads it
	// again whenever it changes, as does ReloadOverlay.
	OverlayPath string
	// OverlayDebounce is how long Watch waits for the overlay file's
	// events to stop before reading it; 0 is 200ms.
	OverlayDebounce time.Duration
}

// Client keeps the engine's rules those of the management server's
// pushes. Watch runs it; Status and Ready are safe for concurrent use.
type Client struct {
	o         Options
	engine    Target
	log       *zap.Logger
	node      *core.Node
	dial      []grpc.DialOption
	ready     chan struct{}
	readyOnce sync.Once
	quiet     time.Duration // quietAfter; tests shorten it

	// applyMu serializes pushes and overlay readings, and guards the
	// fields up to mu.
	applyMu sync.Mutex
	// rejected identifies the last push refused (its checksum with the
	// overlay applied, or its error if it did not render), and
	// rejectedErr is why.
	rejected    string
	rejectedErr error
	// overlay is the overlay in use (nil: none), overlayErr why the
	// overlay file's last reading was refused (nil if it was not), and
	// inUse the push whose rules are in use, which an overlay edit is
	// checked against.
	overlay    *config.Overlay
	overlayErr error
	inUse      []*anypb.Any
	// unmatched is what the rules in use leave unmatched of the overlay,
	// one message an entry, logged when it changes.
	unmatched []string

	mu     sync.Mutex // guards status
	status config.ReloadStatus

	// What State reports, written by Watch's goroutine.
	connected  atomic.Bool
	lastPush   atomic.Int64 // Unix nanoseconds; 0: none yet
	applied    atomic.Bool  // a push's rules have been in use
	nUnmatched atomic.Int64 // len(unmatched)
}

// State is what a Client knows of its server, for metrics and the log.
type State struct {
	// Connected is set while a stream to the server is open.
	Connected bool
	// LastPush is when the last push arrived, good or not; zero if none
	// has.
	LastPush time.Time
	// Applied is set once a push's rules have been put in use (a push
	// equal to the rules in use counts); the rules the client started
	// with do not count.
	Applied bool
	// OverlayUnmatched counts the overlay's entries that match nothing in
	// the rules in use.
	OverlayUnmatched int
}

// State returns what the client knows of its server now.
func (c *Client) State() State {
	st := State{Connected: c.connected.Load(), Applied: c.applied.Load(), OverlayUnmatched: int(c.nUnmatched.Load())}
	if n := c.lastPush.Load(); n != 0 {
		st.LastPush = time.Unix(0, n)
	}
	return st
}

// Target holds the rules a Client keeps: a *limits.Engine, or one
// source's share of an engine's rules (pkg/sources).
type Target interface {
	Rules() *limits.Ruleset
	SetRules(*limits.Ruleset)
}

// New returns a client that will apply pushes to engine, whose rules in
// use are its rules until the first good push. It reads the TLS files
// and checks the options, but connects only in Watch.
func New(engine Target, log *zap.Logger, o Options) (*Client, error) {
	if o.Server == "" {
		return nil, errors.New("xds server: required")
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = DefaultBackoffInitial
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = max(DefaultBackoffMax, o.BackoffInitial)
	}
	switch {
	case o.BackoffMax < o.BackoffInitial:
		return nil, fmt.Errorf("xds backoff: the longest wait (%v) is shorter than the first (%v)", o.BackoffMax, o.BackoffInitial)
	case o.BackoffJitter < 0 || o.BackoffJitter > 1:
		return nil, fmt.Errorf("xds backoff jitter: want 0 to 1, got %v", o.BackoffJitter)
	case o.MaxMessageBytes < 0:
		return nil, fmt.Errorf("xds max message size: want 0 (gRPC's default) or more, got %d", o.MaxMessageBytes)
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		cfg, err := o.TLS.config()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.WithUserAgent("ratelimit-sidecar"),
	}
	if o.MaxMessageBytes > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMessageBytes)))
	}
	// A target gRPC cannot parse is a mistake to report now.
	conn, err := grpc.NewClient(o.Server, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds server %q: %w", o.Server, err)
	}
	conn.Close()
	var ov *config.Overlay
	if o.OverlayPath != "" {
		if ov, err = config.LoadOverlay(o.OverlayPath); err != nil {
			return nil, fmt.Errorf("xds overlay: %w", err)
		}
	}
	rs := engine.Rules()
	c := &Client{
		overlay: ov,
		o:       o, engine: engine, log: log, dial: dial,
		node:   &core.Node{Id: o.NodeID, Metadata: o.NodeMetadata, UserAgentName: "ratelimit-sidecar"},
		ready:  make(chan struct{}),
		quiet:  quietAfter,
		status: config.ReloadStatus{Checksum: rs.Checksum, Files: rs.Files, LoadedAt: time.Now()},
	}
	if o.StartWithoutRules {
		c.markReady()
	}
	return c, nil
}

// Status returns the rules in use and the last push's result, as a
// config.Reloader's: Files are the names of the resources in use.
func (c *Client) Status() config.ReloadStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Ready is closed once the engine's rules are a push's, or at once with
// Options.StartWithoutRules.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Awaiting says what the client waits for before Ready, for health
// answers and the log.
func (c *Client) Awaiting() string {
	return fmt.Sprintf("the first rules from the xDS server %s (node ID %q)", c.o.Server, c.o.NodeID)
}

func (c *Client) markReady() { c.readyOnce.Do(func() { close(c.ready) }) }

// Watch keeps a stream to the server open and applies its pushes until
// ctx ends, then returns nil. A stream that cannot open, fails or ends is
// opened again, on a new connection, after a backoff. Every new stream
// tells the server the version last ACKed, as Envoy does, so a server
// whose rules did not change meanwhile need not push them again.
func (c *Client) Watch(ctx context.Context) error {
	if c.o.OverlayPath != "" {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.watchOverlay(wctx)
		}()
		defer func() { stop(); <-done }()
	}
	sctx := metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	ads := sotw.NewADSClient(sctx, c.node, resource.RateLimitConfigType)
	reconnect, repeat := c.backoff(), c.backoff()
	for {
		pushed, err := c.stream(ctx, ads, repeat)
		if ctx.Err() != nil {
			return nil
		}
		if pushed {
			reconnect.reset()
		}
		wait := reconnect.next()
		c.log.Warn("xds stream ended; reconnecting",
			zap.String("server", c.o.Server), zap.Duration("retry_in", wait), zap.Error(err))
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

func (c *Client) backoff() *backoff {
	return &backoff{initial: c.o.BackoffInitial, max: c.o.BackoffMax, jitter: c.o.BackoffJitter}
}

// stream runs one stream on a new connection until it fails. It reports
// whether the stream carried a push. repeat paces the NACKs of a
// rejected push that the server sends again unchanged, as
// go-control-plane's snapshot cache does at once after every NACK.
func (c *Client) stream(ctx context.Context, ads sotw.ADSClient, repeat *backoff) (bool, error) {
	conn, err := grpc.NewClient(c.o.Server, c.dial...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := ads.InitConnect(conn); err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	c.connected.Store(true)
	defer c.connected.Store(false)
	c.log.Info("xds stream open", zap.String("server", c.o.Server), zap.String("node_id", c.o.NodeID))
	quiet := time.AfterFunc(c.quiet, func() {
		c.log.Warn("xds server has pushed nothing on this stream yet; check that it has a snapshot for the node ID",
			zap.String("server", c.o.Server), zap.String("node_id", c.o.NodeID), zap.Duration("waited", c.quiet))
	})
	defer quiet.Stop()
	pushed := false
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return pushed, err
		}
		c.lastPush.Store(time.Now().UnixNano())
		if !pushed {
			quiet.Stop()
			pushed = true
		}
		repeated, err := c.apply(resp.Resources)
		if err == nil {
			repeat.reset()
			if err := ads.Ack(); err != nil {
				return pushed, fmt.Errorf("send ACK: %w", err)
			}
			continue
		}
		if !repeated {
			repeat.reset()
		} else if !sleep(ctx, repeat.next()) {
			return pushed, ctx.Err()
		}
		if err := ads.Nack(errorDetail(err)); err != nil {
			return pushed, fmt.Errorf("send NACK: %w", err)
		}
	}
}

// apply checks a push and, if it is good, makes it the engine's rules.
// It returns nil to ACK, else the error to NACK with. repeated reports a
// push equal to the last one rejected, which is neither logged nor
// reported again. Only Watch's goroutine calls it.
func (c *Client) apply(resources []*anypb.Any) (repeated bool, err error) {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	p := prepare(resources, c.overlay)
	if c.rejected != "" && p.key == c.rejected {
		return true, c.rejectedErr
	}
	var rs *limits.Ruleset
	switch {
	case p.err != nil:
		err = p.err
	case len(p.files) == 0 && !c.o.AllowEmpty:
		err = ErrNoResources
	default:
		rs, err = p.parse(c.o.Rules)
	}
	if err != nil {
		c.rejected, c.rejectedErr = p.key, err
		c.reject("xds push rejected; keeping the rules in use", zap.Int("resources", len(resources)), err)
		return false, err
	}
	c.rejected, c.rejectedErr = "", nil
	c.inUse = resources
	c.applied.Store(true)
	defer c.markReady()
	c.use(rs, p, "xds push restores the rules in use")
	return false, nil
}

// reject records a refused push or overlay, logged at Error with msg.
// Requires c.applyMu held.
func (c *Client) reject(msg string, field zap.Field, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status.LastAttempt = time.Now()
	c.status.Failures++
	c.status.LastError = err
	c.log.Error(msg, field, zap.String("checksum", c.status.Checksum), zap.Error(err))
	c.notify(err)
}

// use makes rs, parsed from p, the rules in use, unless they are those
// in use already; then, if a refusal is over, restored is logged. The
// status's error stays that of a refusal that still stands (see
// standing). Requires c.applyMu held.
func (c *Client) use(rs *limits.Ruleset, p prepared, restored string) {
	c.reportUnmatched(p.overlaid.Unmatched)
	now := time.Now()
	c.mu.Lock()
	c.status.LastAttempt = now
	same := rs.Checksum == c.status.Checksum
	c.mu.Unlock()
	if same {
		// The rules in use, again: after a reconnect, a rejected push
		// undone, or an overlay edit that changes no rule.
		c.resolved(restored)
		return
	}
	err := c.standing()
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.engine.Rules()
	c.engine.SetRules(rs)
	c.status = config.ReloadStatus{
		Checksum: rs.Checksum, LoadedAt: now, Files: rs.Files, LastAttempt: now, LastError: err,
		Successes: c.status.Successes + 1, Failures: c.status.Failures,
	}
	c.logApplied(old, rs, p.names())
	c.notify(err)
}

// standing is the refusal that still stands, which the status reports:
// the overlay file's last reading's, else the last push's, else nil.
// Requires c.applyMu held.
func (c *Client) standing() error {
	if c.overlayErr != nil {
		return c.overlayErr
	}
	return c.rejectedErr
}

// resolved updates the status after a refusal ended: if none stands any
// more, the status's error is cleared, msg logged, and a success
// reported. Requires c.applyMu held.
func (c *Client) resolved(msg string) {
	err := c.standing()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status.LastError == nil || c.status.LastError == err {
		return
	}
	c.status.LastError = err
	if err != nil {
		return
	}
	c.status.Successes++
	c.log.Info(msg, zap.String("checksum", c.status.Checksum))
	c.notify(nil)
}

// logApplied logs one line for a swap from old to rs: at Warn if it
// leaves no rule or drops domains of old, as a file reload does.
func (c *Client) logApplied(old, rs *limits.Ruleset, resources []string) {
	fields := []zap.Field{zap.String("checksum", rs.Checksum), zap.Strings("resources", resources), zap.Strings("domains", rs.Domains())}
	dropped := config.DroppedDomains(old, rs)
	switch {
	case len(rs.Domains()) == 0:
		c.log.Warn("xds push applied without rules; every request gets OK", append(fields, zap.Strings("dropped_domains", dropped))...)
	case len(dropped) > 0:
		c.log.Warn("xds push applied; domains dropped", append(fields, zap.Strings("dropped_domains", dropped))...)
	default:
		c.log.Info("xds push applied", fields...)
	}
}

// notify reports the status to OnApply. Requires c.mu held.
func (c *Client) notify(err error) {
	if c.o.OnApply != nil {
		c.o.OnApply(c.status, err)
	}
}

// errorDetail is a NACK's message: every problem, one a line, cut at a
// line's end to stay within maxErrorDetail.
func errorDetail(err error) string {
	msg := err.Error()
	if len(msg) <= maxErrorDetail {
		return msg
	}
	cut := strings.LastIndexByte(msg[:maxErrorDetail], '\n')
	if cut < 0 {
		cut = maxErrorDetail
	}
	rest := strings.Count(msg[cut:], "\n")
	return fmt.Sprintf("%s\n(%d more lines in the sidecar's log)", msg[:cut], rest)
}
