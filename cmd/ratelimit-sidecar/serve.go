package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

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
// hard stop), HTTP shutdown.
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
	store := limits.NewMemoryStore()
	engine := limits.NewEngine(rs, store, c.request)

	grpcLis, err := net.Listen("tcp", c.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen --grpc-addr: %w", err)
	}
	httpLis, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen --http-addr: %w", err)
	}

	gs := grpc.NewServer()
	envoy.NewServer(engine, log).Register(gs)
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
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ctx.Err() != nil {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	log.Info("ratelimit-sidecar started",
		zap.String("version", version),
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("http_addr", httpLis.Addr().String()),
		zap.String("store", "memory"),
		zap.String("config", c.configPath),
		zap.Strings("domains", rs.Domains()),
		zap.String("checksum", rs.Checksum),
	)

	if c.onReady != nil {
		c.onReady(grpcLis.Addr().String(), httpLis.Addr().String())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(grpcLis); err != nil {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := hsrv.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", zap.Duration("drain_delay", c.drainDelay))
		hs.Shutdown() // every service NOT_SERVING
		if c.drainDelay > 0 && ctx.Err() != nil {
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
		if err := hsrv.Shutdown(sctx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
		return nil
	})
	err = g.Wait()
	log.Info("stopped", zap.Error(err))
	return err
}
