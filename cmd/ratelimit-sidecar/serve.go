package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func newLogger(c *config, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.logFormat == "console" {
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(w)), level)
	// Sample repeated messages so a hot-path error cannot flood the log.
	core = zapcore.NewSamplerWithOptions(core, time.Second, 10, 100)
	return zap.New(core), nil
}

// serve runs the sidecar until ctx is cancelled, then shuts down in order:
// health NOT_SERVING, drain delay, graceful gRPC stop (falling back to a
// hard stop), HTTP shutdown, store close.
func serve(ctx context.Context, c *config, logw io.Writer) error {
	log, err := newLogger(c, logw)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do if the log cannot flush

	rs, err := limits.Load(c.configPath, limits.LoadOptions{MergeDomains: c.mergeDomains})
	if err != nil {
		return fmt.Errorf("invalid config:\n%w", err)
	}
	m := metrics.New(version, c.nearLimitRatio)
	m.Loaded(rs.Checksum, time.Now())

	g, gctx := errgroup.WithContext(ctx)

	// The store: embedded memory, or Redis behind a circuit breaker.
	var store limits.Store
	storeName := "memory"
	ready := func(context.Context) error { return nil }
	var closeStore func() error
	if c.useRedis() {
		storeName = "redis"
		goredis.SetLogger(redisLog{log})
		conn := &redisConn{opts: c.redis, log: log}
		if err := conn.connect(ctx, 2*time.Second); err != nil {
			if !errors.Is(err, limits.ErrStoreUnavailable) {
				return err // bad options: fail at startup
			}
			log.Error("redis unreachable at startup; serving by the failure mode while retrying", zap.Error(err))
			g.Go(func() error { return conn.connectLoop(gctx, time.Second) })
		}
		breaker := limits.NewBreaker(m.Store("redis", conn), conn.Ping, limits.BreakerOptions{
			OnChange: func(open bool, cause error) {
				m.BreakerChanged(open, cause)
				if open {
					log.Error("redis failing; circuit open, serving by the failure mode", zap.Error(cause))
				} else {
					log.Info("redis answers again; circuit closed")
				}
			},
		})
		store = breaker
		ready = func(ctx context.Context) error {
			if breaker.Open() {
				return limits.ErrBreakerOpen
			}
			return conn.Ping(ctx)
		}
		closeStore = func() error {
			breaker.Close()
			return conn.Close()
		}
	} else {
		mem := limits.NewMemoryStore()
		store = m.Store("memory", mem)
	}
	engine := limits.NewEngine(rs, store, c.request,
		limits.WithObserver(m),
		limits.WithFailureMode(c.failureMode),
		limits.WithLocalFallback(limits.NewMemoryStore(), c.localDivisor))
	reloader := limits.NewReloader(c.configPath, limits.LoadOptions{MergeDomains: c.mergeDomains}, engine, log,
		limits.ReloaderOptions{Debounce: c.reloadDebounce, OnReload: m.Reloaded})

	grpcLis, err := net.Listen("tcp", c.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen --grpc-addr: %w", err)
	}
	httpLis, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen --http-addr: %w", err)
	}

	// Stream workers serve RPCs on long-lived goroutines whose stacks have
	// already grown: a new goroutine per RPC spent about a tenth of the
	// CPU growing its stack.
	gs := grpc.NewServer(append(envoy.ServerOptions(), grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))))...)
	rls := envoy.NewServer(engine, log, envoy.WithResponseHeaders(c.responseHeaders))
	rls.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	for _, name := range []string{"", envoy.ServiceName} {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Ready when the store can decide, or when the failure mode can
		// answer in its place.
		switch err := ready(r.Context()); {
		case ctx.Err() != nil:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case err != nil && c.failureMode == limits.FailError:
			http.Error(w, "store unavailable: "+err.Error(), http.StatusServiceUnavailable)
		case err != nil:
			fmt.Fprintf(w, "ok (store unavailable, failure mode %s)\n", c.failureMode)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	admin := mux
	if c.adminAddr != "" {
		admin = http.NewServeMux()
	}
	admin.Handle("GET /debug/config", debugConfig(reloader, engine))
	admin.Handle("/json", rls.JSONHandler()) // any method: the handler answers 405 itself
	servers := []*http.Server{{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	listeners := []net.Listener{httpLis}
	if c.adminAddr != "" {
		adminLis, err := net.Listen("tcp", c.adminAddr)
		if err != nil {
			grpcLis.Close()
			httpLis.Close()
			return fmt.Errorf("listen --admin-addr: %w", err)
		}
		servers = append(servers, &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second})
		listeners = append(listeners, adminLis)
	}

	log.Info("ratelimit-sidecar started",
		zap.String("version", version),
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("http_addr", httpLis.Addr().String()),
		zap.Stringer("admin_addr", listeners[len(listeners)-1].Addr()),
		zap.String("store", storeName),
		zap.String("failure_mode", c.failureMode.String()),
		zap.String("config", c.configPath),
		zap.Strings("domains", rs.Domains()),
		zap.Int("rules", countRules(rs)),
		zap.String("checksum", rs.Checksum),
	)
	// SIGHUP reloads; catch it before anyone may send it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if c.onReady != nil {
		c.onReady(grpcLis.Addr().String(), httpLis.Addr().String(), listeners[len(listeners)-1].Addr().String())
	}

	g.Go(func() error {
		// Without a watch, SIGHUP still reloads: not worth stopping for.
		if err := reloader.Watch(gctx); err != nil {
			log.Error("config watch failed; reload with SIGHUP", zap.Error(err))
		}
		return nil
	})
	g.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				log.Info("SIGHUP: reloading config")
				reloader.Reload() //nolint:errcheck // Reload logs its own errors
			}
		}
	})
	g.Go(func() error {
		if err := gs.Serve(grpcLis); err != nil {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	for i, srv := range servers {
		g.Go(func() error {
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http %s: %w", listeners[i].Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		return shutdown(c, log, hs, gs, servers, ctx.Err() != nil)
	})
	err = g.Wait()
	if closeStore != nil {
		if cerr := closeStore(); cerr != nil {
			log.Warn("close store", zap.Error(cerr))
		}
	}
	log.Info("stopped", zap.Error(err))
	return err
}

// shutdown stops serving in order. drain is false when a server failed, so
// there is no point waiting for clients to go away.
func shutdown(c *config, log *zap.Logger, hs *health.Server, gs *grpc.Server, servers []*http.Server, drain bool) error {
	log.Info("shutting down", zap.Duration("drain_delay", c.drainDelay))
	hs.Shutdown() // every service NOT_SERVING
	if drain && c.drainDelay > 0 {
		t := time.NewTimer(c.drainDelay)
		<-t.C
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(c.shutdownTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		log.Warn("in-flight requests did not finish in time; stopping")
		gs.Stop()
		<-stopped
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}

func countRules(rs *limits.Ruleset) int {
	n := 0
	var walk func([]*limits.Rule)
	walk = func(rules []*limits.Rule) {
		for _, r := range rules {
			n++
			walk(r.Children)
		}
	}
	for _, d := range rs.Domains() {
		walk(rs.Rules(d))
	}
	return n
}
