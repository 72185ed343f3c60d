package store

import (
	"context"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// SharedOptions says how NewShared guards a shared store.
type SharedOptions struct {
	// Ping checks that the store answers (for Redis, that it takes
	// writes): Ready calls it while the breaker is closed. Required.
	Ping func(context.Context) error
	// Probe is the breaker's probe: nil is Ping. A store whose parts
	// have breakers of their own (Cluster masters) closes it when any
	// part answers.
	Probe func(context.Context) error
	// Refused, if set, returns the error of the store refusing its
	// configuration, nil while it does not: Ready reports it before any
	// other, once the probe may have shown a refusal over.
	Refused func() error
	// DenyCacheEntries is the deny cache's size (DenyCacheOptions);
	// 0 leaves the deny cache out.
	DenyCacheEntries int
	// OnBreakerChange is the breaker's BreakerOptions.OnChange.
	OnBreakerChange func(open bool, cause error)
	// Close releases the store, after the breaker stops; nil if there is
	// nothing to release.
	Close func() error
}

// Shared is a shared store behind the middleware a remote backend needs:
// requests go to its leases, then its deny cache, which answers keys
// known to be over their limit even while the breaker is open, then the
// breaker, then the store.
type Shared struct {
	limits.Store // Leases

	// Breaker guards the store; RLQS takes quota from it, below the
	// leases and the deny cache.
	Breaker *Breaker
	// Deny is the deny cache; nil if SharedOptions.DenyCacheEntries is 0.
	Deny *DenyCache
	// Leases admit leased limits (lease: N) locally, before anything
	// else; at shutdown they give their unused hits back to the store
	// itself, past the breaker, if it is a limits.Returner.
	Leases *Leases

	o       SharedOptions
	refunds RefundNotices // nil if the store sends none, or Deny is nil
}

// RefundNotices is a shared store that tells of refunds that any of its
// users sends: redis.Lazy. Forget is called with each key refunded, and
// lost when notices may have been missed.
type RefundNotices interface {
	Refunds(ctx context.Context, forget func(key string), lost func())
}

// NewShared puts next, which calls the shared store backend (next itself,
// or a store wrapping it, such as Timed), behind a breaker, a deny cache
// and leases.
func NewShared(next, backend limits.Store, o SharedOptions) *Shared {
	probe := o.Probe
	if probe == nil {
		probe = o.Ping
	}
	s := &Shared{o: o}
	s.Breaker = NewBreaker(next, probe, BreakerOptions{OnChange: o.OnBreakerChange})
	top := limits.Store(s.Breaker)
	if o.DenyCacheEntries > 0 {
		s.Deny = NewDenyCache(s.Breaker, DenyCacheOptions{MaxEntries: o.DenyCacheEntries})
		top = s.Deny
		s.refunds, _ = backend.(RefundNotices)
	}
	ret, _ := backend.(limits.Returner)
	s.Leases = NewLeases(top, LeasesOptions{Return: ret})
	s.Store = s.Leases
	return s
}

// Ready reports whether the store can decide now: the refusal of its
// configuration if there is one, else ErrBreakerOpen while the breaker
// is open, else what Ping says.
func (s *Shared) Ready(ctx context.Context) error {
	err := ErrBreakerOpen
	if !s.Breaker.Open() {
		err = s.o.Ping(ctx)
	}
	// After the probe, which may show a refusal over.
	if s.o.Refused != nil {
		if rerr := s.o.Refused(); rerr != nil {
			return rerr
		}
	}
	return err
}

// FollowRefunds returns what keeps the deny cache told of the refunds
// that other users of the store send, until its context ends; nil if
// there is no deny cache or the store sends no notices.
func (s *Shared) FollowRefunds() func(context.Context) {
	if s.refunds == nil {
		return nil
	}
	deny := s.Deny
	return func(ctx context.Context) {
		s.refunds.Refunds(ctx, func(key string) { deny.Forget(key) }, deny.Clear)
	}
}

// Close stops the breaker, then closes the store.
func (s *Shared) Close() error {
	s.Breaker.Close()
	if s.o.Close == nil {
		return nil
	}
	return s.o.Close()
}
