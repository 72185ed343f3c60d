package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gctune"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/grpctls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlpmetrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// serve runs the sidecar until ctx is cancelled, then shuts down in order:
// health NOT_SERVING, drain delay, graceful gRPC stop (falling back to a
// hard stop), HTTP shutdown, store close.
func serve(ctx context.Context, c *settings, logw io.Writer) error {
	log, err := newLogger(c.log, logw)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do if the log cannot flush
	if err := serveLogged(ctx, c, log); err != nil {
		return logFatal(log, c.log.format, err)
	}
	log.Info("stopped")
	return nil
}

// serveLogged is serve once the log is open.
func serveLogged(ctx context.Context, c *settings, log *zap.Logger) error {
	c.store.warnPasswordInArgs(log)
	envlog.Log(log, &c.env)
	c.store.logURL(log)
	c.gc.Apply()

	rs, err := loadFirstRules(c.rules, c.health.RequireRules, log)
	if err != nil {
		return err
	}
	build := buildInfo()
	m := metrics.New(metrics.Build{Version: build.Version, Revision: build.Revision}, c.nearLimitRatio, c.metricMaxValues)
	m.Loaded(rs.Checksum, time.Now())
	tr, err := tracing.Start(ctx, c.tracing, log)
	if err != nil {
		return err
	}
	defer tr.Stop(c.shutdown.timeout) // on a startup error; else below

	st, err := openStore(ctx, c.store, log, m)
	if err != nil {
		return err
	}
	defer st.closeLogged(log)
	engine := newEngine(rs, st, c.engine, c.store.memoryMaxKeys, m)
	otlp, err := otlpmetrics.Start(ctx, c.otlp, m.Registry, m.PushErrors("otlp"), log)
	if err != nil {
		return err
	}
	defer otlp.Stop(c.shutdown.timeout) // on a startup error; else below
	sd, err := c.statsd.Start(metrics.NewReference(m.Registry, engine.Rules), m.PushErrors("statsd"), log)
	if err != nil {
		return err
	}
	defer sd.Stop() // on a startup error; else below

	var srv *servers // set before anything reloads: rules load from run on
	// onRules follows every reload and xDS push.
	onRules := func(rs config.ReloadStatus, err error) {
		if err == nil {
			st.rulesChanged()
			srv.health.Refresh()
		}
		m.Reloaded(rs, err)
	}
	rules, err := rulesFrom(c.rules, engine, log, m, onRules)
	if err != nil {
		return err
	}

	certs, err := grpctls.Open(c.tls, bounds.TLSHandshakeSlots(), c.bounds.RequestTimeout, log, m)
	if err != nil {
		return err
	}
	lis, err := listen(c.addrs, &c.bounds)
	if err != nil {
		return err
	}
	m.Listeners(lis.capped())
	srv = newServers(ctx, c, log, engine, rules, st, m, certs, tr)
	m.Messages(srv.bounds.Messages)
	logStarted(log, lis, st, rs, c.engine.FailureMode, c.rules, adminServed(c.env.RefMode, c.addrs.admin))
	if c.onReady != nil {
		c.onReady(lis.addrs())
	}
	err = srv.run(ctx, lis, rules)
	// No request is being decided any more: give what leases hold back,
	// within a second.
	st.releaseLeases(ctx, time.Second, log)
	// The calls have ended, and their spans with them: send what is
	// queued before the store closes.
	tr.Stop(c.shutdown.timeout)
	// The last stats, counted until the servers stopped.
	sd.Stop()
	otlp.Stop(c.shutdown.timeout)
	return err
}

// loadFirstRules loads the rules the sidecar starts with, and says at
// Warn when it starts without any.
func loadFirstRules(o rulesOptions, requireRules bool, log *zap.Logger) (*limits.Ruleset, error) {
	// With --health-requires-rules (envoyproxy/ratelimit's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), starting without rules is
	// meant: the sidecar says it is not serving until rules arrive. A
	// reload to no rules is still refused.
	startOpts := o.config
	startOpts.AllowEmpty = o.config.AllowEmpty || requireRules
	rs, err := startRules(o, startOpts)
	if errors.Is(err, config.ErrNoRules) {
		return nil, &rulesError{problems: []error{err}, hint: "; set --allow-empty-rules to start without rules"}
	}
	if err != nil {
		return nil, &rulesError{problems: config.Problems(err)}
	}
	switch {
	case len(rs.Domains()) > 0 || o.xds.Enabled:
	case !o.config.AllowEmpty:
		log.Warn("starting without rules (--health-requires-rules): not serving until rules load", zap.String("config", o.path))
	default:
		log.Warn("starting without rules (--allow-empty-rules); every request gets OK", zap.String("config", o.path))
	}
	return rs, nil
}

// closeLogged closes the store, if it has anything to close, and logs a
// failure to.
func (st *sidecarStore) closeLogged(log *zap.Logger) {
	if st.close == nil {
		return
	}
	if err := st.close(); err != nil {
		log.Warn("close store", zap.Error(err))
	}
}

// newLogger returns the log o asks for, written to w.
func newLogger(o logOptions, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(o.level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if o.format == "console" {
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(w)), level)
	// Sample repeated messages so a hot-path error cannot flood the log;
	// the rejection log bounds and counts its lines itself.
	sampled := zapcore.NewSamplerWithOptions(core, time.Second, 10, 100)
	return zap.New(rejectlog.Unsampled(sampled, core)), nil
}

// newEngine builds the engine of o: the rules, decided on st, with a
// memory store of at most maxKeys keys for failure mode local.
func newEngine(rs *limits.Ruleset, st *sidecarStore, o limits.EngineOptions, maxKeys int, m *metrics.Metrics) *limits.Engine {
	local := memory.New(memory.Options{MaxKeys: maxKeys})
	m.MemoryStore("local", local)
	o.Local, o.Observer = local, m
	return limits.NewEngine(rs, st, o)
}

// logStarted says the sidecar started: where it listens (the admin
// endpoints only where served says), on which store and failure mode,
// with which rules, from where (o).
func logStarted(log *zap.Logger, lis *listeners, st *sidecarStore, rs *limits.Ruleset, mode limits.FailureMode, o rulesOptions, served bool) {
	gcPercent, memLimit := gctune.Current()
	log.Info("ratelimit-sidecar started",
		zap.String("version", buildInfo().Version),
		zap.String("revision", buildInfo().Revision),
		zap.String("grpc_addr", lis.grpc.Addr().String()),
		zap.String("http_addr", lis.http.Addr().String()),
		zap.String("admin_addr", adminLogAddr(served, lis)),
		zap.String("store", st.name),
		zap.String("failure_mode", mode.String()),
		zap.String("config", o.path),
		zap.String("config_type", o.xds.ConfigType),
		zap.Strings("domains", rs.Domains()),
		zap.Int("rules", countRules(rs)),
		zap.String("checksum", rs.Checksum),
		zap.Int64("gc_percent", gcPercent),
		zap.Int64("memory_limit_bytes", memLimit),
	)
	if len(o.xds.Sources) > 0 {
		log.Info("rule sources", zap.Stringer("xds_sources", &o.xds.Sources))
	}
	if !o.xds.Enabled {
		return
	}
	fields := []zap.Field{zap.String("xds_server", o.xds.Server), zap.String("xds_node_id", o.xds.NodeID)}
	if o.xds.StartWithoutRules {
		log.Warn("serving before the xDS server has delivered rules (--force-start-without-rules): every request gets OK until it does; ratelimit_sidecar_xds_rules_received says when", fields...)
	} else {
		log.Info("not ready until the xDS server delivers rules", fields...)
	}
}

// adminLogAddr is where the start log says the admin endpoints are.
func adminLogAddr(served bool, lis *listeners) string {
	if !served {
		return "none (run as " + refenv.Name + ": set --admin-addr to serve /debug/config and /debug/counters)"
	}
	return lis.adminAddr()
}
