package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// DefaultDenyCacheEntries is DenyCacheOptions.MaxEntries's default.
const DefaultDenyCacheEntries = 65536

const (
	// denySweepEvery bounds how often one shard scans for expired entries
	// while it has room; a full cache sweeps a shard whenever one of its
	// entries has expired.
	denySweepEvery = time.Second
)

// DenyCacheOptions tunes a DenyCache. Zero fields take the defaults.
type DenyCacheOptions struct {
	// MaxEntries is the most keys the cache remembers, expired ones not
	// yet swept included. Default DefaultDenyCacheEntries.
	MaxEntries int
	// Now is the clock the cache measures resets by. Default time.Now,
	// whose monotonic reading keeps the cache right across wall-clock
	// steps. Tests inject a fake clock, and must give the wrapped store
	// the same one.
	Now func() time.Time
}

// DenyCache is a Store that remembers which keys its store found over the
// limit, and until when, and rejects requests on those keys itself. A hot
// key that is over its limit then costs no round trip to Redis. Its
// rejections are exact, not approximations: the store would reject the
// same requests. record says why, and how a Redis Cluster or a failover
// can make the cache reject for longer; it never over-admits.
//
// A batch with a usage charge or a refund of some hits always goes to the
// store, which counts them whatever the verdict; a refund makes the cache
// forget its key, here and, through Forget, on other sidecars (see
// Apply). Shadow checks are never cached and never cause a local
// rejection. A batch the cache rejects reports Unknown outcomes for the
// checks it does not know (see Apply).
//
// Apart from refunds, the cache trusts that nothing but requests changes
// the store's counters, and only by adding hits: after a FLUSHALL or a
// change of key prefix, call Clear.
//
// Memory is bounded by MaxEntries, and there is no background goroutine
// (see insert). A full cache does not evict live entries; it does not
// record the new one (see Dropped), which then only costs that key its
// usual round trip.
//
// The zero value is not usable; call NewDenyCache.
type DenyCache struct {
	next limits.Store
	now  func() time.Time
	max  int64

	gen      atomic.Uint64 // bumped by Clear, so calls that started before it record nothing
	forgets  atomic.Uint64 // bumped by every Forget; see denyShard.forgot
	n        atomic.Int64  // entries in all shards
	answered atomic.Uint64
	dropped  atomic.Uint64

	shards shards[denyShard]
}

type denyShard struct {
	mu sync.RWMutex
	m  map[string]denyEntry // guarded by mu
	// soonest is at or before the earliest until in m, zero when m is
	// empty; nextSweep is when the shard may sweep again while the cache
	// has room. Both guarded by mu.
	soonest   time.Time
	nextSweep time.Time
	// forgot is DenyCache.forgets as of the last Forget of a key of the
	// shard: a call that started before it may have read the key before
	// its refund, so records nothing in the shard. Guarded by mu.
	forgot uint64
	_      [64]byte // keep hot shards' locks off each other's cache lines
}

// denyEntry says: until until, a check of this key against a limit with
// these numbers that needs probe or more hits is over.
type denyEntry struct {
	limit *limits.Limit // matched by CountsLike
	probe uint64
	until time.Time
}

// NewDenyCache returns an empty cache in front of next.
func NewDenyCache(next limits.Store, opts DenyCacheOptions) *DenyCache {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultDenyCacheEntries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &DenyCache{next: next, now: opts.Now, max: int64(opts.MaxEntries), shards: newShards[denyShard]()}
	for i := range c.shards.all {
		c.shards.all[i].m = make(map[string]denyEntry)
	}
	return c
}

var _ limits.Store = (*DenyCache)(nil)

// Apply implements limits.Store. It answers b itself if the cache
// rejects it (see deny), even when ctx is done, since that needs no I/O;
// otherwise it calls the wrapped store and records the non-shadow checks
// it finds over. Errors are the wrapped store's, unchanged, and record
// nothing.
//
// In a batch answered locally, the checks the cache does not know report
// an Unknown outcome (limits.Outcome.Unknown): only the store knows their
// state, and a guess would mislead Envoy, which writes its headers from
// the status with the least remaining (a zero outcome read as "nothing
// left, resets now", and led clients to retry at once under the wrong
// limit). The request's verdict and what is reported come from the
// cached checks, which are right.
//
// A refund (limits.Check.Refund) takes hits away, and makes room that a
// remembered verdict would hide: every replica would say over until the
// window ends, the trap of a refund invisible to a local cache. So a
// batch with a refund of some hits always goes to the store (see
// charges), and the cache then forgets the refunded keys; refunds that
// other sidecars send reach it through Forget (the Redis store publishes
// every refunded key: see redis.Store.Refunds).
func (c *DenyCache) Apply(ctx context.Context, b *limits.Batch) error {
	now := c.now()
	if c.n.Load() > 0 && !charges(b.Checks) && c.deny(b, now) {
		c.answered.Add(1)
		b.DecidedBy = DecidedByDenyCache
		return nil
	}
	gen, forgets := c.gen.Load(), c.forgets.Load()
	if err := c.next.Apply(ctx, b); err != nil {
		return err
	}
	c.record(b, now, gen, forgets)
	for i := range b.Checks {
		if ch := &b.Checks[i]; ch.Refunds() {
			c.Forget(ch.Key)
		}
	}
	return nil
}

// Forget drops what the cache remembers of key and reports whether it
// held an entry (expired or not). Call it when the key's counter went
// down in the store: a refund (limits.Check.Refund), or a reset. Calls to
// the store under way when Forget runs record nothing in the key's shard,
// so none can put back, as they read it, what the refund or reset undid.
// Safe for concurrent use.
func (c *DenyCache) Forget(key string) bool {
	n := c.forgets.Add(1)
	sh := c.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.forgot = n
	if _, ok := sh.m[key]; !ok {
		return false
	}
	delete(sh.m, key)
	c.n.Add(-1)
	return true
}

// deny fills b's outcomes from the cache and reports whether it rejects
// b: an enforced check is over there, or every quota group of b has a
// check over there (limits.Batch.QuotaOver). If not, b's outcomes are
// left for the store.
//
// A rejected batch has Admitted false; its cached checks are Over with
// Remaining 0 and Reset until − now (until as record computed it), and
// every other check's outcome is Unknown. A quota check over in the cache
// while another quota group may have room rejects nothing: the store
// decides, and may admit.
func (c *DenyCache) deny(b *limits.Batch, now time.Time) bool {
	b.SizeOutcomes()
	over, quota := false, false
	for i := range b.Checks {
		ch := &b.Checks[i]
		b.Outcomes[i] = limits.Outcome{Unknown: true}
		if ch.Limit.Shadow || ch.Refund {
			continue
		}
		if until, ok := c.lookup(ch, now); ok {
			b.Outcomes[i] = limits.Outcome{Over: true, Reset: until.Sub(now)}
			if ch.Enforced() {
				over = true
			} else {
				quota = true
			}
		}
	}
	if !over && quota {
		over = b.QuotaOver(func(i int) bool { return b.Outcomes[i].Over })
	}
	if over {
		b.Admitted = false
	}
	return over
}

// lookup returns when ch stops being over, if the cache knows it is over
// at now. Only ch's own probe counts, not hits of earlier checks on the
// same key in the batch: if ch alone is over, the batch is.
//
// Limits match by limits.Limit.CountsLike (algorithm, requests, window
// and burst), not on the *Limit pointer, so Envoy's per-request override
// limits, which are new pointers every time, are cached too, and a
// reload that changes a limit's numbers never reuses an old entry.
func (c *DenyCache) lookup(ch *limits.Check, now time.Time) (time.Time, bool) {
	sh := c.shards.of(ch.Key)
	sh.mu.RLock()
	e, ok := sh.m[ch.Key]
	sh.mu.RUnlock()
	if !ok || max(ch.Hits, 1) < e.probe || !now.Before(e.until) || !e.limit.CountsLike(ch.Limit) {
		return time.Time{}, false
	}
	return e.until, true
}

// record enters every check of b, but shadow checks, that the store
// found over, as of now, the time read before calling the store, unless
// Clear or a Forget in its shard came since gen and forgets were read. A
// quota check is over whether or not its batch was admitted.
//
// A check the store found Over with Reset R stays over, for every request
// that needs at least as many hits (max(Hits, 1), the check's probe)
// against the same limit numbers, until T = now + R − Tick, Tick being
// the limit's time resolution (1 µs for all but huge limits). That is
// exact: a rejected request consumes nothing, other sidecars can only
// add hits, and every algorithm admits a larger probe no sooner than a
// smaller one, so the store would say Over too. Measuring from now, read
// before the store was called, not from when the answer arrived, keeps T
// at or before the store's own reset, and taking off one Tick covers the
// store flooring its clock to a tick.
//
// On a Redis Cluster the premise that counters only grow fails: a
// request across hash slots reserves hits and refunds them if another
// slot rejects it, and a check rejected because of hits that are then
// refunded stays over here until its Reset. The store's momentary
// under-admission then lasts up to that Reset; the cache never
// over-admits. A failover that loses recent writes has the same effect.
func (c *DenyCache) record(b *limits.Batch, now time.Time, gen, forgets uint64) {
	for i := range min(len(b.Checks), len(b.Outcomes)) {
		ch, out := &b.Checks[i], &b.Outcomes[i]
		// A check whose key an earlier check of the batch shares may be
		// over only because of that check's hits, which a request without
		// it would not carry: recording its probe could deny what the
		// store admits. The first check on a key sees the store's state
		// alone.
		if !out.Over || ch.Limit.Shadow || sharesEarlierKey(b.Checks, i) {
			continue
		}
		until := now.Add(out.Reset - time.Duration(ch.Limit.Tick())*time.Microsecond)
		if !now.Before(until) {
			continue
		}
		c.insert(ch, until, now, gen, forgets)
	}
}

// charges reports whether a check of cs is a usage charge or a refund
// with hits (limits.Check.Charges): those must reach the store, which
// counts them whatever the verdict. A usage charge that goes over still
// counts, into debt; a refund makes room the cache cannot see (see
// Apply).
func charges(cs []limits.Check) bool {
	for i := range cs {
		if cs[i].Charges() {
			return true
		}
	}
	return false
}

// sharesEarlierKey reports whether a check of cs before cs[i] has its key.
func sharesEarlierKey(cs []limits.Check, i int) bool {
	for j := range i {
		if cs[j].Key == cs[i].Key {
			return true
		}
	}
	return false
}

// insert enters ch as over until until, unless Clear or a Forget in its
// shard came since gen and forgets were read: such a call may have read
// the key before the refund or reset. A usage charge that went over
// counted all the same, into debt: its Reset is when one hit fits again,
// so it enters its key as over for every request until the debt is
// repaid.
//
// Memory stays bounded without a background goroutine: expired entries
// are ignored when read (lookup) and dropped by a sweep of the shard that
// runs here, at most once per denySweepEvery per shard while the cache
// has room, or whenever the cache is full and the shard has an expired
// entry.
func (c *DenyCache) insert(ch *limits.Check, until, now time.Time, gen, forgets uint64) {
	l := ch.Limit
	e := denyEntry{limit: l, probe: max(ch.Hits, 1), until: until}
	if ch.Usage {
		// A usage charge that went over counted all the same: its Reset
		// is when one hit fits again, after the charge (the debt repaid).
		e.probe = 1
	}
	sh := c.shards.of(ch.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.gen.Load() != gen || sh.forgot > forgets {
		return // Clear, or a refund in the shard, came since the store was called
	}
	if old, ok := sh.m[ch.Key]; ok {
		// Both are true; keep the old one only if it says more: it covers
		// every request the new one does, for at least as long.
		if old.limit.CountsLike(l) && old.probe <= e.probe && !old.until.Before(e.until) {
			return
		}
		sh.m[ch.Key] = e
		sh.lower(until)
		return
	}
	full := c.n.Load() >= c.max
	if !sh.soonest.IsZero() && !now.Before(sh.soonest) && (full || !now.Before(sh.nextSweep)) {
		c.sweep(sh, now)
	}
	if c.n.Add(1) > c.max {
		c.n.Add(-1)
		c.dropped.Add(1)
		return
	}
	sh.m[ch.Key] = e
	sh.lower(until)
}

// lower makes sure soonest is at or before t.
// requires sh.mu held
func (sh *denyShard) lower(t time.Time) {
	if sh.soonest.IsZero() || t.Before(sh.soonest) {
		sh.soonest = t
	}
}

// sweep drops the shard's expired entries.
// requires sh.mu held
func (c *DenyCache) sweep(sh *denyShard, now time.Time) {
	sh.nextSweep = now.Add(denySweepEvery)
	sh.soonest = time.Time{}
	for k, e := range sh.m {
		if !now.Before(e.until) {
			delete(sh.m, k)
			c.n.Add(-1)
			continue
		}
		sh.lower(e.until)
	}
}

// Clear drops every entry. Calls to the wrapped store that are under way
// record nothing. Call it when the rules are reloaded, and whenever the
// store's counters may have been reset behind the cache's back.
func (c *DenyCache) Clear() {
	c.gen.Add(1)
	for i := range c.shards.all {
		sh := &c.shards.all[i]
		sh.mu.Lock()
		c.n.Add(-int64(len(sh.m)))
		sh.m = make(map[string]denyEntry)
		sh.soonest, sh.nextSweep = time.Time{}, time.Time{}
		sh.mu.Unlock()
	}
}

// Answered returns how many batches the cache rejected without calling
// the wrapped store.
func (c *DenyCache) Answered() uint64 { return c.answered.Load() }

// Dropped returns how many over checks were not recorded because the
// cache was full. If it grows, raise MaxEntries.
func (c *DenyCache) Dropped() uint64 { return c.dropped.Load() }

// Len returns how many entries the cache holds, expired ones not yet
// swept included.
func (c *DenyCache) Len() int { return int(c.n.Load()) }
