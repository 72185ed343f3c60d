package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/grpctls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// streamWorkers is the least number of gRPC stream workers: enough for
// the requests a busy sidecar has in flight (64 in the benchmarks).
const streamWorkers = 128

// servers are the sidecar's gRPC and HTTP servers.
type servers struct {
	stop           shutdownOptions
	watchLink      string        // --watch-link (config.WatchLink)
	requestTimeout time.Duration // bounds.Server.RequestTimeout
	log            *zap.Logger
	grpc           *grpc.Server
	health         *admin.Health   // what gRPC health and the probes say (health.go)
	http           *http.Server    // health probes and metrics
	admin          *http.Server    // nil: the admin endpoints are on http
	certs          *grpctls.Server // nil: gRPC is plaintext
	// bounds are the gRPC server's bounds: its messages on their way,
	// and its streaming calls whose handlers run (bounds.Handlers).
	bounds *bounds.GRPC

	// stopStreams ends the streaming RPCs (health Watch, reflection),
	// which would otherwise hold GracefulStop for as long as their
	// clients like.
	stopStreams context.CancelFunc

	debug   *http.Server          // nil without --debug-addr
	metrics *http.Server          // nil: the metrics are on http
	follow  func(context.Context) // sidecarStore.follow
}

// newServers builds the servers. ctx is serve's: once it ends, /readyz
// says the sidecar is shutting down. certs is nil unless gRPC is served
// over TLS, and tr without --tracing.
func newServers(ctx context.Context, c *settings, log *zap.Logger, engine *limits.Engine, reloader ruleSource, st *sidecarStore, m *metrics.Metrics, certs *grpctls.Server, tr *tracing.Provider) *servers {
	s := &servers{stop: c.shutdown, watchLink: c.watchLink, requestTimeout: c.bounds.RequestTimeout, log: log, certs: certs, follow: st.follow}
	stopping, stopStreams := context.WithCancel(context.Background())
	s.stopStreams = stopStreams
	s.bounds = c.bounds.NewGRPC(stopping)
	// Stream workers serve RPCs on long-lived goroutines whose stacks have
	// already grown: a new goroutine per RPC spent about a tenth of the
	// CPU growing its stack. A worker stays busy while its RPC waits for
	// Redis, and grpc-go starts a new goroutine for an RPC that finds no
	// worker free, so there are workers for as many RPCs as a busy
	// sidecar has in flight, not as many as it has CPUs. An idle worker
	// costs a parked goroutine.
	// The codec (RLS's own, and the message bounds) and the credentials,
	// every connection's messages bounded after its handshakes, are set
	// by the bounds' Options.
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(uint32(max(4*runtime.GOMAXPROCS(0), streamWorkers)))}
	grace := c.shutdown.timeout
	if c.connGrace > 0 {
		grace = c.connGrace
	}
	s.grpc = grpc.NewServer(append(opts, s.bounds.Options(certs.Creds(), grace, bounds.IDBounds{Entries: c.engine.Limits.MaxEntries, EntryBytes: c.engine.Limits.MaxValueBytes})...)...)
	rlsOpts := envoy.Options{Headers: c.responseHeaders,
		Shadow: c.shadowMode, HeaderNames: c.responseNames, DynamicMetadata: c.dynamicMetadata}
	rej := c.rejections.New(log, st.name, time.Now)
	if rej != nil {
		rlsOpts.Rejections = rej
	}
	m.RejectionLog(rej.Suppressed)
	if tr != nil {
		rlsOpts.Tracing = &envoy.Tracing{Tracer: tr.Tracer("github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"), Propagator: tr.Propagator(), Store: st.name}
	}
	rls := envoy.NewServer(engine, log, rlsOpts)
	rls.Register(s.grpc)
	names := healthNames
	if st.shared == nil { // a local store has no fleet to share quota with: Envoy gets Unimplemented
		log.Info("rlqs not served: quota is shared through Redis; set --redis-url (or Sentinel or Cluster) to serve Envoy's rate_limit_quota filter")
	} else {
		rlqs.Register(s.grpc, engine, st.shared, log.Named("rlqs"), rlqsOptions(c.rlqs, st, m, tr))
		names = append(slices.Clip(healthNames), rlqs.ServiceName)
	}
	s.health = newHealth(ctx, c.health, engine.Rules, reloader, st, names)
	s.health.Register(s.grpc)
	reflection.Register(s.grpc)
	s.bounds.Registered(s.grpc)

	adm := admin.New(adminOptions(adminServed(c.env.RefMode, c.addrs.admin), c.counters, log, engine, reloader, st, m, s.health))
	mux := http.NewServeMux()
	adm.Health(mux)
	prom := metrics.Handler(m.Registry, engine.Rules, c.refMetrics)
	if c.addrs.separateMetrics() {
		mm := http.NewServeMux()
		mm.Handle("GET "+c.metricsPath, prom)
		s.metrics = c.bounds.HTTPServer(mm)
	} else {
		mux.Handle("GET "+c.metricsPath, prom)
	}
	adminMux := mux
	if c.addrs.admin != "" {
		adminMux = http.NewServeMux()
		s.admin = c.bounds.HTTPServer(adminMux)
	}
	if adminServed(c.env.RefMode, c.addrs.admin) {
		adm.Debug(adminMux)
	}
	if c.addrs.debug != "" {
		// The reference's debug port has no /debug/config.
		s.debug = c.bounds.HTTPServer(adm.DebugPort(!c.env.RefMode))
	}
	adminMux.Handle("/json", rls.JSONHandler()) // any method: the handler answers 405 itself
	s.http = c.bounds.HTTPServer(mux)
	return s
}

// rlqsOptions completes the RLQS flags' options with what else RLQS is
// given: the backend to return unassigned quota to, its metrics (which
// exist from this call on, so only when RLQS is served) and its tracer.
func rlqsOptions(o rlqs.Options, st *sidecarStore, m *metrics.Metrics, tr *tracing.Provider) rlqs.Options {
	o.Return, _ = st.counters.(limits.Returner)
	o.Metrics, o.Tracer = m.RLQS(), tr.Tracer("github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs")
	return o
}

// adminServed reports whether the admin endpoints (/debug/config,
// /debug/counters) are served. Run as refenv.Name they are only on
// --admin-addr: the reference has none, and its HTTP port listens on
// every address, where /debug/counters would show anyone who reaches it
// any counter they can name. /json stays on --http-addr there, as the
// reference has it.
func adminServed(refMode bool, adminAddr string) bool { return !refMode || adminAddr != "" }

// adminOptions are what the admin endpoints read of the sidecar; the
// probes answer from health.
func adminOptions(served bool, co admin.CountersOptions, log *zap.Logger, engine *limits.Engine, rules ruleSource, st *sidecarStore, m *metrics.Metrics, health *admin.Health) admin.Options {
	o := admin.Options{
		Health:         health,
		Rules:          engine.Rules,
		Status:         rules.Status,
		StoreReady:     st.ready,
		FailingDomains: engine.FailingDomains,
	}
	if !served {
		return o
	}
	co.Rules, co.Validate, co.StoreName, co.Log, co.ResetDone = engine.Rules, engine.Validate, st.name, log, m.CounterResets()
	o.Counters = co
	if st.counters != nil {
		o.Counters.Store = st.counters
	}
	if st.deny != nil {
		o.Counters.Deny = st.deny
	}
	if st.leases != nil {
		o.Counters.Leases = st.leases
	}
	return o
}

// run serves until ctx ends or a server fails, reloading the rules on
// file changes and SIGHUP, then shuts down.
func (s *servers) run(ctx context.Context, lis *listeners, reloader ruleSource) error {
	// SIGHUP reloads; catch it before anyone may send it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		s.health.Run(gctx)
		return nil
	})
	g.Go(func() error {
		// Without a watch, SIGHUP still reloads: not worth stopping for.
		if err := reloader.Watch(gctx); err != nil {
			s.log.Error("config watch failed; reload with SIGHUP", zap.Error(err))
		}
		return nil
	})
	g.Go(func() error {
		s.certs.Watch(gctx)
		return nil
	})
	if follow := s.follow; follow != nil {
		g.Go(func() error {
			follow(gctx)
			return nil
		})
	}
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				s.log.Info("SIGHUP: reloading config")
				reloader.Reload() //nolint:errcheck // Reload logs its own errors
				s.certs.Reload()
			}
		}
	})
	g.Go(func() error {
		// ErrServerStopped: shutdown began before Serve did.
		if err := s.grpc.Serve(lis.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	serveHTTP(g, s.http, lis.http)
	if s.admin != nil {
		serveHTTP(g, s.admin, lis.admin)
	}
	if s.debug != nil {
		serveHTTP(g, s.debug, lis.debug)
	}
	if s.metrics != nil {
		serveHTTP(g, s.metrics, lis.metrics)
	}
	if s.watchLink != "" {
		g.Go(func() error {
			reload := func() { reloader.Reload() } //nolint:errcheck // Reload logs its own errors
			if err := config.WatchLink(gctx, s.watchLink, reload, s.log); err != nil {
				s.log.Error("--watch-link watch failed; reload with SIGHUP", zap.Error(err))
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		return s.shutdown(ctx.Err() != nil)
	})
	return g.Wait()
}

// flushGrace is how long answers of calls whose handlers have returned
// get to reach their clients at shutdown before the server stops hard: a
// client that reads takes them in milliseconds.
const flushGrace = time.Second

// flushed returns a channel closed flushGrace after every gRPC handler
// has returned, unless stopped is closed first: the streaming ones,
// which it counts (they end as shutdown begins), and the unary ones,
// which end by their deadline, --grpc-request-timeout after shutdown
// began at most.
func (s *servers) flushed(stopped <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	unary := time.NewTimer(s.requestTimeout)
	streams := s.bounds.Streams.Running.Done()
	go func() {
		defer unary.Stop()
		for range 2 {
			select {
			case <-streams:
				streams = nil
			case <-unary.C:
			case <-stopped:
				return
			}
		}
		t := time.NewTimer(flushGrace)
		defer t.Stop()
		select {
		case <-t.C:
			close(out)
		case <-stopped:
		}
	}()
	return out
}

func serveHTTP(g *errgroup.Group, srv *http.Server, lis net.Listener) {
	g.Go(func() error {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http %s: %w", lis.Addr(), err)
		}
		return nil
	})
}

// shutdown stops serving in order. drain is false when a server failed, so
// there is no point waiting for clients to go away.
func (s *servers) shutdown(drain bool) error {
	s.log.Info("shutting down", zap.Duration("drain_delay", s.stop.drainDelay))
	s.health.Shutdown() // every service NOT_SERVING
	if drain && s.stop.drainDelay > 0 {
		t := time.NewTimer(s.stop.drainDelay)
		<-t.C
	}
	// Unary calls still waiting for their request end within
	// --grpc-request-timeout; streaming calls end now.
	s.stopStreams()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(s.stop.timeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-s.flushed(stopped):
		// Every handler has returned and what they sent had
		// flushGrace to go out: what is left is queued for clients
		// that stopped reading.
		s.log.Info("calls finished, but some answers are not taken by their clients; stopping")
		s.grpc.Stop()
		<-stopped
	case <-t.C:
		s.log.Warn("in-flight requests did not finish in time; stopping")
		s.grpc.Stop()
		<-stopped
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.stop.timeout)
	defer cancel()
	var errs []error
	for _, srv := range []*http.Server{s.http, s.admin, s.debug, s.metrics} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// countRules counts the rules of every domain of rs.
func countRules(rs *limits.Ruleset) int {
	n := 0
	for range rs.All() {
		n++
	}
	return n
}
