package admin

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Cause is why the sidecar does not serve; CauseNone while it does.
type Cause int

// The causes, in the order Health checks them: the first that holds is
// the verdict's.
const (
	CauseNone     Cause = iota
	CauseStopping       // shutdown has begun
	CauseWaiting        // the rule source waits for its first rules
	CauseNoRules        // no rule is loaded, and HealthOptions.RequireRules
	CauseRefused        // Redis refuses the configuration, and HealthOptions.RequireStoreConfig
)

var stoppingVerdict = Verdict{Cause: CauseStopping, Reason: "shutting down"}

// Verdict is whether the sidecar serves: Cause is CauseNone if it does,
// and Reason says why not otherwise. The zero Verdict is serving.
type Verdict struct {
	Cause  Cause
	Reason string
}

// Serving reports whether v says the sidecar serves.
func (v Verdict) Serving() bool { return v.Cause == CauseNone }

// HealthOptions are what the verdict is made of. Rules is required; the
// others may be left zero.
type HealthOptions struct {
	// Stopping is done once shutdown has begun.
	Stopping <-chan struct{}
	// RulesReady, unless nil, is closed once the rule source has its
	// first rules (xDS); until then the verdict is CauseWaiting with what
	// RulesWaiting says (nil: "waiting for rules").
	RulesReady   <-chan struct{}
	RulesWaiting func() string
	// Rules returns the rules in use; with RequireRules
	// (--health-requires-rules) the sidecar does not serve while they
	// hold no domain.
	Rules        func() *limits.Ruleset
	RequireRules bool
	// Refused returns the store's refusal of the sidecar's
	// configuration, nil if there is none; with RequireStoreConfig
	// (--health-requires-redis-config) the sidecar does not serve while
	// there is one. Required with RequireStoreConfig.
	Refused            func() error
	RequireStoreConfig bool
	// RefusalChanged, unless nil, receives when a refusal starts,
	// changes or ends.
	RefusalChanged <-chan struct{}
	// Probe, unless nil, uses the store; Run calls it every ProbeEvery
	// (default 1s) while the verdict is CauseRefused, since a refusal
	// ends only as the store is used, and a sidecar that does not serve
	// may get no request to use it.
	Probe      func(context.Context) error
	ProbeEvery time.Duration
	// Names are the gRPC health service names that follow the verdict.
	Names []string
}

// Health is the sidecar's one answer to "are we serving?", which gRPC
// health (Check and Watch of every name in HealthOptions.Names),
// /healthcheck and /readyz all read. The verdict is kept, not made per
// read: it is made again by Refresh, which the caller runs whenever a
// condition may have changed (a reload), and by Run, which follows the
// conditions that are channels; a read never waits on the store.
// Health is safe for concurrent use.
type Health struct {
	o    HealthOptions
	grpc *health.Server

	mu      sync.Mutex
	v       Verdict
	changed chan struct{} // closed and replaced when v changes
	stopped bool          // Shutdown was called; requires mu held
}

// NewHealth returns the verdict of o as it is now.
func NewHealth(o HealthOptions) *Health {
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = time.Second
	}
	h := &Health{o: o, grpc: health.NewServer(), changed: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.v = h.decide()
	h.setGRPC()
	return h
}

// Register serves gRPC health on s.
func (h *Health) Register(s grpc.ServiceRegistrar) {
	healthpb.RegisterHealthServer(s, h.grpc)
}

// Verdict returns the verdict. Once shutdown has begun it is
// CauseStopping even before Run sees it. While the rule source waits for
// its first rules, the reason is what it waits for now: several sources
// get their rules one by one, and each does not change the verdict.
func (h *Health) Verdict() Verdict {
	if done(h.o.Stopping) {
		return stoppingVerdict
	}
	h.mu.Lock()
	v := h.v
	h.mu.Unlock()
	if v.Cause == CauseWaiting {
		v.Reason = h.waiting()
	}
	return v
}

// Changed returns a channel closed at the verdict's next change; read
// Verdict then, and call Changed again to follow the one after.
func (h *Health) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// Refresh makes the verdict again from the conditions as they are now.
func (h *Health) Refresh() {
	// Held from reading the conditions to publishing the verdict, so
	// that a verdict made before a change is never published after it.
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.set(h.decide())
}

// Shutdown makes the verdict CauseStopping for good, and every gRPC
// health name NOT_SERVING.
func (h *Health) Shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.stopped = true
	h.set(stoppingVerdict)
	h.grpc.Shutdown()
}

// Run refreshes the verdict as the first rules arrive, as a refusal
// starts or ends and as shutdown begins, and probes the store while it
// refuses, until ctx ends.
func (h *Health) Run(ctx context.Context) {
	ready, stopping, refusal := h.o.RulesReady, h.o.Stopping, h.o.RefusalChanged
	var tick <-chan time.Time // nil without a probe: never fires
	if h.o.Probe != nil {
		t := time.NewTicker(h.o.ProbeEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		// A nil channel blocks: each case is off once it has fired.
		select {
		case <-ctx.Done():
			return
		case <-ready:
			ready = nil
		case <-stopping:
			stopping = nil
		case <-refusal:
		case <-tick:
			if h.Verdict().Cause != CauseRefused {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, h.o.ProbeEvery)
			_ = h.o.Probe(pctx) // what it shows comes as a refusal change
			cancel()
		}
		h.Refresh()
	}
}

// decide makes the verdict from the conditions. Requires h.mu held.
func (h *Health) decide() Verdict {
	o := h.o
	switch {
	case done(o.Stopping):
		return stoppingVerdict
	case o.RulesReady != nil && !done(o.RulesReady):
		return Verdict{Cause: CauseWaiting, Reason: h.waiting()}
	case o.RequireRules && len(o.Rules().Domains()) == 0:
		return Verdict{Cause: CauseNoRules, Reason: "no rules loaded"}
	}
	if o.RequireStoreConfig {
		if err := o.Refused(); err != nil {
			return Verdict{Cause: CauseRefused, Reason: err.Error()}
		}
	}
	return Verdict{}
}

// set makes v the verdict: it tells the followers if it changed, and
// gRPC health if whether it serves changed. Requires h.mu held.
func (h *Health) set(v Verdict) {
	if v == h.v {
		return
	}
	flip := v.Serving() != h.v.Serving()
	h.v = v
	close(h.changed)
	h.changed = make(chan struct{})
	if flip {
		h.setGRPC()
	}
}

// setGRPC sets every gRPC health name to what h.v says. Requires h.mu
// held.
func (h *Health) setGRPC() {
	st := healthpb.HealthCheckResponse_SERVING
	if !h.v.Serving() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range h.o.Names {
		h.grpc.SetServingStatus(name, st)
	}
}

// waiting returns what the rule source waits for.
func (h *Health) waiting() string {
	if h.o.RulesWaiting == nil {
		return "waiting for rules"
	}
	return h.o.RulesWaiting()
}

// done reports whether c is closed; a nil c never is.
func done(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
