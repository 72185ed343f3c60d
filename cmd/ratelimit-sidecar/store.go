package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redislog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// backend is one kind of store the sidecar can decide on. Adding one
// means writing its package and one entry in backends.
type backend struct {
	name string
	// configured reports whether the flags ask for this backend.
	configured func(*settings) bool
	// open builds it. A remote backend (one with a ping) is put behind a
	// circuit breaker.
	open func(ctx context.Context, c *settings, log *zap.Logger) (opened, error)
}

// opened is a backend's store and what the sidecar needs to run it.
type opened struct {
	limits.Store
	// ping checks that a remote store answers, and for Redis that it
	// takes writes; nil for a local one.
	ping func(context.Context) error
	// probe is the circuit breaker's probe: ping, unless parts of the
	// store have breakers of their own (Cluster masters), when any part
	// answering closes it. Nil means ping.
	probe func(context.Context) error
	// close releases it; nil if there is nothing to release.
	close func() error
	// refusals reports the remote store refusing the sidecar for its
	// configuration; nil if it cannot.
	refusals refusals
	// refusalChanged receives when a refusal starts, changes or ends;
	// nil if refusals is.
	refusalChanged <-chan struct{}
	// clientLog takes the client library's own messages; nil if it
	// writes none.
	clientLog *redislog.Logger
	// credentials keeps Redis credentials that change current; nil if
	// they do not change.
	credentials *credentialKeeper
}

// refusals is what a store reports of refusals for its configuration:
// redis.Lazy.
type refusals interface {
	ConfigErrors() []*redis.ConfigError
	metrics.RedisConfigStats
}

// backends lists the backends, most specific first: the first that is
// configured is used, and the memory store always is.
var backends = []backend{
	{name: "redis", configured: func(c *settings) bool { return c.redis.Configured() }, open: openRedis},
	{name: "memory", configured: func(*settings) bool { return true }, open: openMemory},
}

// chooseBackend returns the backend the flags ask for.
func chooseBackend(c *settings) backend {
	for _, b := range backends {
		if b.configured(c) {
			return b
		}
	}
	panic("no backend configured: the memory store must accept every configuration")
}

func openMemory(_ context.Context, c *settings, _ *zap.Logger) (opened, error) {
	return opened{Store: memory.New(memory.Options{MaxKeys: c.memoryMaxKeys})}, nil
}

func openRedis(ctx context.Context, c *settings, log *zap.Logger) (opened, error) {
	clientLog := redislog.New(log)
	goredis.SetLogger(clientLog)
	// Size 1: a change not yet seen needs no second signal, since its
	// reader reads the refusals as they are then.
	changed := make(chan struct{}, 1)
	ro := c.redis
	keep, err := redisCredentials(ctx, c, &ro, log)
	if err != nil {
		return opened{}, err
	}
	stopKeeping := runAll(ctx, keep.run)
	lazy, err := redis.Connect(ctx, ro, redis.LazyOptions{
		OnConnect: func() { log.Info("redis connected") },
		OnConfigError: func(e *redis.ConfigError, cleared bool) {
			redislog.ConfigError(log, e, cleared)
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		stopKeeping()
		return opened{}, err
	}
	if !lazy.Connected() {
		log.Error("redis not connected at startup; serving by the failure mode while retrying", zap.Error(lazy.LastError()))
	}
	closeAll := func() error {
		err := lazy.Close()
		stopKeeping()
		return err
	}
	o := opened{Store: lazy, ping: lazy.Probe, probe: lazy.ProbeAny, close: closeAll, refusals: lazy, refusalChanged: changed,
		clientLog: clientLog}
	if len(keep.sources) > 0 {
		o.credentials = keep
	}
	return o, nil
}

// misconfigured returns the readiness error for refusals es, nil if
// there are none.
func misconfigured(es []*redis.ConfigError) error {
	if len(es) == 0 {
		return nil
	}
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return fmt.Errorf("%w: %w", admin.ErrMisconfigured, errors.Join(errs...))
}

// sidecarStore is the store the engine decides on, with what readiness
// and shutdown need.
type sidecarStore struct {
	limits.Store
	name string
	// ready reports whether the store can decide now.
	ready func(context.Context) error
	close func() error
	// deny answers requests known to be over their limit without the
	// backend; nil for a local backend, or when --deny-cache-entries is 0.
	deny *store.DenyCache
	// leases admit leased limits locally; nil for a local backend.
	leases *store.Leases
	// counters is the backend, for the admin counter endpoints.
	counters admin.CounterStore
	// shared is the shared store behind its breaker, which RLQS takes
	// quota from; nil for a local backend.
	shared limits.Store
	// refusals is the backend's record of refusals for its
	// configuration, and refusalChanged signals its changes; both nil
	// if it keeps none.
	refusals       refusals
	refusalChanged <-chan struct{}
	// follow, if set, runs until its context ends: it keeps the deny
	// cache told of refunds that other sidecars send.
	follow func(context.Context)
}

// refundNotices is a shared store that tells of refunds that any
// sidecar sends: redis.Lazy.
type refundNotices interface {
	Refunds(ctx context.Context, forget func(key string), lost func())
}

// refused returns the error of Redis refusing the sidecar's
// configuration (admin.ErrMisconfigured), nil if it does not.
func (s *sidecarStore) refused() error {
	if s.refusals == nil {
		return nil
	}
	return misconfigured(s.refusals.ConfigErrors())
}

// releaseLeases gives the hits that leases hold unused back to the
// backend, within timeout, and logs what it did. For shutdown, once no
// request is being decided.
func (s *sidecarStore) releaseLeases(ctx context.Context, timeout time.Duration, log *zap.Logger) {
	if s.leases == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	n, err := s.leases.Release(ctx)
	if err != nil {
		log.Warn("leased hits not given back; they end with their windows", zap.Error(err))
		return
	}
	if n > 0 {
		// The store takes back at most this many: less of what a window
		// or a bucket no longer holds.
		log.Info("unused leased hits handed back", zap.Uint64("hits", n))
	}
}

// rulesChanged drops what the store remembers of the old rules.
func (s *sidecarStore) rulesChanged() {
	if s.deny != nil {
		s.deny.Clear()
	}
}

// openStore builds the configured backend, timed for metrics and, if it
// is remote, behind a circuit breaker, a deny cache and leases: the
// engine's batches go to the leases, then the deny cache, which answers
// keys known to be over their limit even while the breaker is open, then
// the breaker.
func openStore(ctx context.Context, c *settings, log *zap.Logger, m *metrics.Metrics) (*sidecarStore, error) {
	b := chooseBackend(c)
	o, err := b.open(ctx, c, log)
	if err != nil {
		return nil, err
	}
	if ms, ok := o.Store.(metrics.MemoryStoreStats); ok {
		m.MemoryStore(b.name, ms)
	}
	if o.refusals != nil {
		m.RedisConfigErrors(redis.ConfigErrorKinds, o.refusals)
	}
	if o.clientLog != nil {
		m.RedisClientMessages(o.clientLog.Messages)
	}
	if o.credentials != nil {
		m.RedisCredentials(o.credentials.changes, o.credentials.failures)
	}
	s := &sidecarStore{
		Store: store.Timed(o.Store, m.StoreCalls(b.name)),
		name:  b.name,
		ready: func(context.Context) error { return nil },
		close: o.close,

		refusals:       o.refusals,
		refusalChanged: o.refusalChanged,
	}
	s.counters, _ = o.Store.(admin.CounterStore)
	if o.ping == nil {
		return s, nil
	}
	s.shared = s.guard(b.name, o, log, m)
	if c.denyCacheEntries > 0 {
		s.deny = store.NewDenyCache(s.shared, store.DenyCacheOptions{MaxEntries: c.denyCacheEntries})
		s.Store = s.deny
		m.DenyCache(s.deny)
		if r, ok := o.Store.(refundNotices); ok {
			deny := s.deny
			s.follow = func(ctx context.Context) {
				r.Refunds(ctx, func(key string) { deny.Forget(key) }, deny.Clear)
			}
		}
	}
	// Leased limits (lease: N) admit from local leases before anything
	// else; only a shared store can grant them. At shutdown, the hits
	// they hold go back to the backend itself, past the breaker.
	ret, _ := o.Store.(limits.Returner)
	s.leases = store.NewLeases(s.Store, store.LeasesOptions{Return: ret})
	s.Store = s.leases
	return s, nil
}

// guard puts a circuit breaker in front of s's shared backend o, named
// name, and makes s's readiness and close go through it: ready probes
// the backend while the circuit is closed, and reports a configuration
// the backend refuses.
func (s *sidecarStore) guard(name string, o opened, log *zap.Logger, m *metrics.Metrics) *store.Breaker {
	probe := o.probe
	if probe == nil {
		probe = o.ping
	}
	breaker := store.NewBreaker(s.Store, probe, store.BreakerOptions{
		OnChange: func(open bool, cause error) {
			m.BreakerChanged(open, cause)
			if open {
				log.Error(name+" failing; circuit open, serving by the failure mode", zap.Error(cause))
				return
			}
			log.Info(name + " answers again; circuit closed")
			if o.clientLog != nil {
				o.clientLog.Recovered()
			}
		},
	})
	s.Store = breaker
	s.ready = func(ctx context.Context) error {
		err := store.ErrBreakerOpen
		if !breaker.Open() {
			err = o.ping(ctx)
		}
		// After the probe, which may show a refusal over.
		if o.refusals != nil {
			if merr := misconfigured(o.refusals.ConfigErrors()); merr != nil {
				return merr
			}
		}
		return err
	}
	s.close = func() error {
		breaker.Close()
		if o.close == nil {
			return nil
		}
		return o.close()
	}
	return breaker
}
