package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redislog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// storeOptions are the flags of the store the engine decides on and of
// what decides while it cannot: the memory store, or Redis with its
// credentials, and the middleware over it.
type storeOptions struct {
	redis     redis.Options
	auth      redisauth.Options // credentials that change while the sidecar runs
	sentinels string            // --redis-sentinel-addrs, for finish to split
	cluster   string            // --redis-cluster-addrs, for finish to split
	urlInArgs bool              // --redis-url is on the command line, for ps to show
	hostPort  bool              // --redis-url was host:port, taken as redis://host:port

	failureMode      limits.FailureMode
	localDivisor     uint64
	denyCacheEntries int
	memoryMaxKeys    int
}

// maxRedisPoolSize is the most connections --redis-pool-size asks for
// per Redis node: a tenth of Redis's default maxclients, so that ten
// sidecars at it fill no node. Requests are pipelined, so a handful of
// connections carries the load of thousands.
const maxRedisPoolSize = 1000

// finishRedis reads Redis's URL, its address lists and its passwords.
func (o *storeOptions) finishRedis(getenv func(string) (string, bool)) error {
	var err error
	if o.redis.URL, o.hostPort, err = redis.HostPortURL(o.redis.URL); err != nil {
		return err
	}
	o.redis.SentinelAddrs = splitList(o.sentinels)
	o.redis.ClusterAddrs = splitList(o.cluster)
	if o.redis.Password, err = secret(getenv, "RLS_REDIS_PASSWORD", "--redis-password-file", o.auth.PasswordFile); err != nil {
		return err
	}
	o.redis.SentinelPassword, err = secret(getenv, "RLS_REDIS_SENTINEL_PASSWORD", "--redis-sentinel-password-file", o.auth.SentinelPasswordFile)
	return err
}

// checkMemory checks the bounds of what the stores hold.
func (o *storeOptions) checkMemory() error {
	switch {
	case o.memoryMaxKeys < 1:
		return fmt.Errorf("--memory-max-keys: want 1 or more, got %d", o.memoryMaxKeys)
	case o.denyCacheEntries < 0:
		return fmt.Errorf("--deny-cache-entries: want 0 (off) or more, got %d", o.denyCacheEntries)
	}
	return nil
}

// check checks the Redis flags: a flag that names only part of a
// topology is a mistake to report now, not a reason to run on the
// memory store.
func (o *storeOptions) check() error {
	switch {
	case o.redis.PoolSize < 0 || o.redis.PoolSize > maxRedisPoolSize:
		return fmt.Errorf("--redis-pool-size: want 0 (go-redis's default) to %d connections per Redis node, got %d", maxRedisPoolSize, o.redis.PoolSize)
	case o.redis.Timeout != 0 && o.redis.Timeout < time.Millisecond:
		return fmt.Errorf("--redis-timeout: want 1ms or more, got %v", o.redis.Timeout)
	}
	if err := o.auth.Validate(o.redis); err != nil {
		return err
	}
	if o.redis.Configured() {
		if err := o.redis.Validate(); err != nil {
			return fmt.Errorf("redis flags (--redis-url, --redis-sentinel-master and --redis-sentinel-addrs, or --redis-cluster-addrs): %w", err)
		}
	}
	return nil
}

// redisConnMaxLifetimeHelp is --redis-conn-max-lifetime's help.
const redisConnMaxLifetimeHelp = "close a Redis connection once it is this old, between requests, so none outlives rotated credentials (0: never; with --redis-aws-iam, 0 means 11h)"

// logURL says, at start, that --redis-url was host:port.
func (o *storeOptions) logURL(log *zap.Logger) {
	if o.hostPort {
		log.Info("--redis-url is host:port, as envoyproxy/ratelimit's REDIS_URL: taken as redis://host:port", zap.String("redis_url", o.redis.URL))
	}
}

// warnPasswordInArgs warns once if --redis-url on the command line holds
// a password: ps shows it to every user of the host. The environment and
// a password file do not.
func (o *storeOptions) warnPasswordInArgs(log *zap.Logger) {
	if !o.urlInArgs {
		return
	}
	u, err := url.Parse(o.redis.URL)
	if err != nil || u.User == nil {
		return // an invalid URL fails when the store opens
	}
	if pw, ok := u.User.Password(); !ok || pw == "" {
		return
	}
	log.Warn("--redis-url holds a password, which ps shows to every user of the host; set the URL in RLS_REDIS_URL, or the password in --redis-password-file, instead",
		zap.String("redis_url", u.Redacted()))
}

// backend is one kind of store the sidecar can decide on. Adding one
// means writing its package and one entry in backends.
type backend struct {
	name string
	// configured reports whether the flags ask for this backend.
	configured func(storeOptions) bool
	// open builds it. A remote backend (one with a ping) is put behind a
	// circuit breaker.
	open func(ctx context.Context, o storeOptions, log *zap.Logger) (opened, error)
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
	credentials *redisauth.Keeper
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
	{name: "redis", configured: func(o storeOptions) bool { return o.redis.Configured() }, open: openRedis},
	{name: "memory", configured: func(storeOptions) bool { return true }, open: openMemory},
}

// chooseBackend returns the backend the flags ask for.
func chooseBackend(o storeOptions) backend {
	for _, b := range backends {
		if b.configured(o) {
			return b
		}
	}
	panic("no backend configured: the memory store must accept every configuration")
}

func openMemory(_ context.Context, o storeOptions, _ *zap.Logger) (opened, error) {
	return opened{Store: memory.New(memory.Options{MaxKeys: o.memoryMaxKeys})}, nil
}

func openRedis(ctx context.Context, so storeOptions, log *zap.Logger) (opened, error) {
	clientLog := redislog.New(log)
	goredis.SetLogger(clientLog)
	// Size 1: a change not yet seen needs no second signal, since its
	// reader reads the refusals as they are then.
	changed := make(chan struct{}, 1)
	ro := so.redis
	keep, err := so.auth.Credentials(ctx, &ro, log)
	if err != nil {
		return opened{}, err
	}
	stopKeeping := keep.Start(ctx)
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
	if keep.Changing() {
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
// is remote, behind a circuit breaker, a deny cache and leases
// (store.Shared).
func openStore(ctx context.Context, so storeOptions, log *zap.Logger, m *metrics.Metrics) (*sidecarStore, error) {
	b := chooseBackend(so)
	o, err := b.open(ctx, so, log)
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
		m.RedisCredentials(o.credentials.Changes, o.credentials.Failures)
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
	shared := store.NewShared(s.Store, o.Store, store.SharedOptions{
		Ping:             o.ping,
		Probe:            o.probe,
		Refused:          s.refused,
		DenyCacheEntries: so.denyCacheEntries,
		OnBreakerChange:  breakerChanged(b.name, o.clientLog, log, m),
		Close:            o.close,
	})
	s.Store, s.shared, s.deny, s.leases = shared, shared.Breaker, shared.Deny, shared.Leases
	if shared.Deny != nil {
		m.DenyCache(shared.Deny)
	}
	s.ready, s.close, s.follow = shared.Ready, shared.Close, shared.FollowRefunds()
	return s, nil
}

// breakerChanged returns what logs and counts the circuit breaker of
// backend name opening and closing.
func breakerChanged(name string, clientLog *redislog.Logger, log *zap.Logger, m *metrics.Metrics) func(open bool, cause error) {
	return func(open bool, cause error) {
		m.BreakerChanged(open, cause)
		if open {
			log.Error(name+" failing; circuit open, serving by the failure mode", zap.Error(cause))
			return
		}
		log.Info(name + " answers again; circuit closed")
		if clientLog != nil {
			clientLog.Recovered()
		}
	}
}
