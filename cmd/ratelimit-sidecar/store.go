package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// redisConn is a limits.Store that is Redis once connected. Until the
// first connection succeeds its calls fail with ErrStoreUnavailable, so
// the sidecar starts, and serves by its failure mode, while Redis is down.
type redisConn struct {
	opts  redis.Options
	log   *zap.Logger
	store atomic.Pointer[redis.Store]
}

var errNotConnected = fmt.Errorf("redis not connected yet: %w", limits.ErrStoreUnavailable)

func (r *redisConn) Apply(ctx context.Context, b *limits.Batch) error {
	s := r.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Apply(ctx, b)
}

func (r *redisConn) Ping(ctx context.Context) error {
	s := r.store.Load()
	if s == nil {
		return errNotConnected
	}
	return s.Ping(ctx)
}

// connect tries to connect once, with a bound of timeout.
func (r *redisConn) connect(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := redis.New(ctx, r.opts)
	if err != nil {
		return err
	}
	r.store.Store(s)
	return nil
}

// connectLoop retries connect every interval until it succeeds or ctx
// ends. It logs the first failure and the success.
func (r *redisConn) connectLoop(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := r.connect(ctx, time.Second); err == nil {
			r.log.Info("redis connected")
			return nil
		} else if !errors.Is(err, limits.ErrStoreUnavailable) {
			return err
		}
	}
}

func (r *redisConn) Close() error {
	if s := r.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}

// redisLog sends go-redis's own messages (dial failures and the like) to
// zap at Warn, where the logger's sampling keeps an outage from flooding
// the log.
type redisLog struct{ log *zap.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("go-redis", zap.String("message", fmt.Sprintf(format, v...)))
}
