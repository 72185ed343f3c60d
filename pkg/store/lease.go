package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Leases is a limits.Store that admits from leases: for a limit with
// Limit.Lease N, it takes up to N hits at a time from the shared store it
// wraps, in the same atomic step as a request that needs the store anyway
// (limits.Check.Extra), and then admits later requests from that local
// lease without a store call until it runs out. The shared store counts
// leased hits at once, so the fleet never admits more than the limit; what
// a sidecar holds unused when its lease ends is admitted by nobody, so
// each sidecar under-admits by at most N per window, and less as the
// limit nears exhaustion, since the store grants at most half of what
// remains (limits.Limit.Grant).
//
// At shutdown, Release gives the hits that leases hold unused back to
// the shared store, if it is a Returner (LeasesOptions.Return), so that
// a sidecar that stops mid-window leaves no hits unused (for buckets,
// at most those of its last grant go back; see Release).
//
// A refund (limits.Check.Refund) is never leased either: the shared
// store gives its hits back at once, to the fleet's budget, where every
// sidecar's next refill finds them.
//
// A request is still all-or-nothing: hits taken from a lease for a
// request that another limit rejects go back to the lease. A usage
// charge (limits.Check.Usage) is never leased: the shared store counts it
// at once, and if it takes the limit into debt, this sidecar's lease of
// the key ends, unspent, until the debt is repaid; another sidecar's
// ends when it learns of the debt from the store, so the fleet admits at
// most a lease per sidecar while the limit is in debt. At most one
// refill per key is under way at a time, so a sidecar never holds more
// than N hits of a key. A lease ends when its window does (fixed and
// sliding window), or, for the buckets, once the bucket would have
// refilled it. Shadow limits, quota checks (limits.Check.Group), whose
// verdict depends on the other quota groups' in the store, and a key
// that appears twice in a batch, are not leased.
//
// Leases is safe for concurrent use and starts no goroutines.
type Leases struct {
	next   limits.Store
	ret    limits.Returner
	now    func() time.Time
	shards shards[leaseShard]
	pool   sync.Pool // *leaseScratch
}

// LeasesOptions tunes Leases. The zero value is ready to use.
type LeasesOptions struct {
	// Now is the local clock leases expire by; nil means time.Now.
	Now func() time.Time
	// Return is the shared store that Release gives unused hits back
	// to; nil: they end with their windows.
	Return limits.Returner
}

type leaseShard struct {
	mu sync.Mutex
	m  map[string]*lease // guarded by mu
}

// lease is one key's local lease. requires its shard's mu
type lease struct {
	limit     *limits.Limit // what it was taken under; see Limit.GrantsLike
	avail     uint64        // hits left to admit locally
	until     time.Time     // when the lease ends
	shared    uint64        // the store's Remaining when it was last refilled
	refilling bool          // a request asking the store for more is under way
	done      chan struct{} // closed when that request ends
	dry       time.Time     // no top-ups before: the limit had run dry
	// receipt is the last grant's GrantReceipt, and granted the hits
	// granted under it: Release gives back at most those, under it.
	receipt int64
	granted uint64
}

// leaseScratch is Apply's per-call working memory.
type leaseScratch struct {
	sub    limits.Batch
	subIdx []int    // sub.Checks[k] is the batch's check subIdx[k]
	taken  []uint64 // hits taken from the lease per batch check
	local  []bool   // answered from the lease
	refill []bool   // asked the store for a refill
	room   []uint64 // hits a refill asks for
}

// NewLeases returns a Leases in front of next, a shared store that grants
// extra hits (limits.Check.Extra).
func NewLeases(next limits.Store, o LeasesOptions) *Leases {
	l := &Leases{next: next, ret: o.Return, now: o.Now, shards: newShards[leaseShard]()}
	if l.now == nil {
		l.now = time.Now
	}
	for i := range l.shards.all {
		l.shards.all[i].m = make(map[string]*lease)
	}
	l.pool.New = func() any { return new(leaseScratch) }
	return l
}

// Apply implements limits.Store. It decides b in phases: take what it
// can from the leases (takeAll), send the rest, and the refills due, to
// the shared store as one batch (plan), then settle: a batch that only
// refilled was answered by the leases (settleRefills); a rejected or
// failed one gives the leases their hits back (giveBackAll); and the
// store's outcomes go to the checks it answered (merge).
func (l *Leases) Apply(ctx context.Context, b *limits.Batch) error {
	if !anyLeased(b.Checks) {
		return l.next.Apply(ctx, b)
	}
	n := len(b.Checks)
	b.SizeOutcomes()
	s := l.pool.Get().(*leaseScratch)
	defer l.pool.Put(s)
	s.reset(n)

	now := l.takeAll(ctx, b, s)
	needStore := s.plan(b)
	s.sub.QuotaGroups = b.QuotaGroups
	b.Admitted = true
	if !needStore {
		b.DecidedBy = DecidedByLease
	}
	if len(s.sub.Checks) == 0 {
		return nil
	}
	err := l.next.Apply(ctx, &s.sub)
	ok := err == nil && s.sub.Admitted
	if !needStore {
		l.settleRefills(b, s, now, err)
		return nil
	}
	b.DecidedBy = s.sub.DecidedBy
	if !ok {
		l.giveBackAll(b, s)
		if err != nil {
			return err
		}
	}
	l.merge(b, s, now, ok)
	b.Admitted = ok
	return nil
}

// takeAll answers what it can of b from the leases, into b.Outcomes and
// s, and returns the time the answers were taken at.
func (l *Leases) takeAll(ctx context.Context, b *limits.Batch, s *leaseScratch) time.Time {
	now := l.now()
	refiller := false // this request asks for a refill of some key
	for i := range b.Checks {
		c := &b.Checks[i]
		if !leasable(b.Checks, i) {
			continue
		}
		for {
			var wait <-chan struct{}
			s.local[i], s.refill[i], wait = l.take(c, now, &b.Outcomes[i], &s.taken[i], &s.room[i])
			refiller = refiller || s.refill[i]
			// A lease that is empty while its refill is out: wait for the
			// refill rather than send one more request to the store. A
			// request that refills a key itself never waits, so no two
			// requests can wait on each other.
			if wait == nil || refiller {
				break
			}
			select {
			case <-wait:
				now = l.now()
				continue
			case <-ctx.Done():
			}
			break
		}
	}
	return now
}

// plan fills s.sub with what goes to the store: the checks of b that the
// leases did not answer, each asking for its refill if one is due, and a
// top-up for each lease that answered but fell low. It reports whether a
// check needs the store's verdict; if not, the store is asked for
// refills only.
func (s *leaseScratch) plan(b *limits.Batch) (needStore bool) {
	for i := range b.Checks {
		c := b.Checks[i]
		switch {
		case s.local[i] && s.refill[i]:
			// Answered from a lease that fell below a quarter: the store only
			// tops it up, with a shadow check of no hits, so that a limit
			// run dry rejects nothing.
			probe := *c.Limit
			probe.Shadow = true
			c = limits.Check{Key: c.Key, Limit: &probe, Extra: s.room[i]}
		case s.local[i]:
			continue
		default:
			needStore = true
			c.Extra = 0
			if s.refill[i] {
				c.Extra = s.room[i]
			}
		}
		s.sub.Checks = append(s.sub.Checks, c)
		s.subIdx = append(s.subIdx, i)
	}
	return needStore
}

// settleRefills adds what the store granted, if it answered (err nil), to
// the leases of a batch that the leases answered alone.
func (l *Leases) settleRefills(b *limits.Batch, s *leaseScratch, now time.Time, err error) {
	ok := err == nil && s.sub.Admitted
	for k, i := range s.subIdx {
		var out limits.Outcome
		if err == nil {
			out = s.sub.Outcomes[k]
		}
		l.refilled(&b.Checks[i], now, out, ok)
	}
}

// giveBackAll undoes the leases' part of a batch that is not admitted:
// nothing is consumed anywhere, so the leases get their hits back (and
// the outcomes they gave count them as left), and the refills asked for
// are no longer under way.
func (l *Leases) giveBackAll(b *limits.Batch, s *leaseScratch) {
	for i := range b.Checks {
		if s.taken[i] > 0 || s.refill[i] {
			l.giveBack(&b.Checks[i], s.taken[i])
		}
		if s.local[i] {
			b.Outcomes[i].Remaining += s.taken[i]
		}
	}
}

// merge sets the outcomes of the checks of b that the store answered,
// adding what it granted to their leases if b is admitted (ok).
func (l *Leases) merge(b *limits.Batch, s *leaseScratch, now time.Time, ok bool) {
	for k, i := range s.subIdx {
		out := s.sub.Outcomes[k]
		if c := &b.Checks[i]; c.Charges() && c.Limit.Lease > 0 {
			out = l.charged(c, now, out)
		}
		if ok && s.refill[i] {
			out = l.refilled(&b.Checks[i], now, out, true)
		}
		if !s.local[i] {
			b.Outcomes[i] = out
		}
	}
}

// take tries to answer check c from its key's lease: it reports local when
// the lease holds enough hits (which it then takes, setting *taken) and
// fills out; otherwise it reports whether this request should ask the
// store for a refill (no other request is doing so), and sets *room to
// the hits that would top the lease up to Limit.Lease. A lease below a
// quarter asks for its refill while it still answers.
func (l *Leases) take(c *limits.Check, now time.Time, out *limits.Outcome, taken, room *uint64) (local, refill bool, wait <-chan struct{}) {
	sh := l.shards.of(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[c.Key]
	if ls == nil || !ls.limit.GrantsLike(c.Limit) {
		if ls != nil {
			ls.endRefill() // its waiters retry with the new lease
		}
		ls = &lease{limit: c.Limit}
		sh.m[c.Key] = ls
		sh.sweep(now)
	}
	if !now.Before(ls.until) {
		ls.avail = 0
	}
	enough := ls.avail >= max(c.Hits, 1)
	// Top the lease up before it runs dry, once it falls below a quarter:
	// the requests that come while the refill is out are still answered
	// here. (Below half cost a third more calls for hot keys.)
	low := ls.avail-min(ls.avail, c.Hits) < (c.Limit.Lease+3)/4
	if enough {
		ls.avail -= c.Hits
		*taken = c.Hits
		*out = limits.Outcome{Remaining: ls.shared + ls.avail, Reset: ls.until.Sub(now)}
		if !low || ls.refilling || now.Before(ls.dry) {
			return true, false, nil
		}
		ls.startRefill(room)
		return true, true, nil
	}
	if ls.refilling {
		return false, false, ls.done
	}
	ls.startRefill(room)
	return false, true, nil
}

// startRefill marks a refill under way and sets *room to the hits that
// top the lease up. requires the lease's shard mu held
func (ls *lease) startRefill(room *uint64) {
	ls.refilling = true
	ls.done = make(chan struct{})
	*room = ls.limit.Lease - min(ls.avail, ls.limit.Lease)
}

// endRefill ends the refill under way, waking the requests that wait for
// it. requires the lease's shard mu held
func (ls *lease) endRefill() {
	if ls.refilling {
		ls.refilling = false
		close(ls.done)
	}
}

// giveBack returns hits taken for a request that was not admitted, and
// ends the refill it asked for, if any.
func (l *Leases) giveBack(c *limits.Check, hits uint64) {
	sh := l.shards.of(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[c.Key]
	if ls == nil || !ls.limit.GrantsLike(c.Limit) {
		return // the lease was replaced meanwhile: its hits are gone
	}
	ls.endRefill()
	ls.avail += hits
}

// refilled adds what the store granted to c's lease and returns the
// outcome to report.
func (l *Leases) refilled(c *limits.Check, sent time.Time, out limits.Outcome, admitted bool) limits.Outcome {
	sh := l.shards.of(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[c.Key]
	if ls == nil || !ls.limit.GrantsLike(c.Limit) {
		return out
	}
	ls.endRefill()
	if admitted && out.Over {
		// A top-up found the limit run dry: none until it could admit.
		ls.dry = sent.Add(out.Reset)
	}
	if !admitted || out.Granted == 0 {
		return out
	}
	// The grant is valid from when the request was sent: no later than
	// the store decided it, so the lease never outlives its window.
	until := sent.Add(out.GrantFor)
	if until.After(ls.until) || !sent.Before(ls.until) {
		if !sent.Before(ls.until) {
			ls.avail = 0 // the old lease had ended
		}
		ls.until = until
	}
	if out.GrantReceipt != ls.receipt {
		// A grant into another state: for a window algorithm, a later
		// window, where the hits the lease still holds were never
		// counted, so they end with their own window.
		if !ls.limit.Algorithm.Bucketed() {
			ls.avail = 0
		}
		ls.receipt, ls.granted = out.GrantReceipt, 0
	}
	ls.avail += out.Granted
	ls.granted += out.Granted
	ls.shared = out.Remaining
	out.Remaining += ls.avail
	out.Granted, out.GrantFor, out.GrantReceipt = 0, 0, 0
	return out
}

// charged tells the lease of c's key what the store answered to c, a
// usage charge or a refund, and returns the outcome to report. A refund
// ends any wait for top-ups. A charge that fit
// leaves the store out less: the lease reports that, with what it holds,
// as it reports its own answers. One that went over put the limit in
// debt until out.Reset from now: the hits the lease holds (counted
// already) are not admitted, and no top-up is asked for before then.
func (l *Leases) charged(c *limits.Check, now time.Time, out limits.Outcome) limits.Outcome {
	sh := l.shards.of(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ls := sh.m[c.Key]
	if ls == nil || !ls.limit.GrantsLike(c.Limit) || !now.Before(ls.until) {
		return out
	}
	if out.Over {
		ls.avail = 0
		ls.dry = now.Add(out.Reset)
		return out
	}
	if c.Refund {
		ls.dry = time.Time{} // the refund made room: top-ups may go again
	}
	ls.shared = out.Remaining
	out.Remaining += ls.avail
	return out
}

// Release gives the hits that live leases hold unused back to the shared
// store (LeasesOptions.Return; without one it only empties the leases),
// and returns how many it asked the store to take back (the store may
// take back fewer: see Returner). It is for shutdown, once no request is
// being decided: a request that comes later starts a new lease. A lease
// gives back at most the hits granted under its last receipt: for a
// window, everything it holds, all granted in the current window; for a
// bucket, its last grant, whose receipt counts the drain since, as hits
// of earlier grants may have drained away already, and giving them back
// could undo other sidecars' hits.
func (l *Leases) Release(ctx context.Context) (uint64, error) {
	now := l.now()
	var checks []limits.Check
	var receipts []int64
	var hits uint64
	for i := range l.shards.all {
		sh := &l.shards.all[i]
		sh.mu.Lock()
		for key, ls := range sh.m {
			h := min(ls.avail, ls.granted)
			live := now.Before(ls.until)
			ls.avail = 0
			if !live || h == 0 {
				continue
			}
			checks = append(checks, limits.Check{Key: key, Limit: ls.limit, Hits: h})
			receipts = append(receipts, ls.receipt)
			hits += h
		}
		sh.mu.Unlock()
	}
	if l.ret == nil || len(checks) == 0 {
		return 0, nil
	}
	if err := l.ret.Return(ctx, checks, receipts); err != nil {
		return 0, err
	}
	return hits, nil
}

// sweep drops ended leases that no request is refilling, when the shard
// has grown; it runs when a new lease is added. requires sh.mu held
func (sh *leaseShard) sweep(now time.Time) {
	if len(sh.m) < 1024 {
		return
	}
	for k, ls := range sh.m {
		if !ls.refilling && !now.Before(ls.until) {
			delete(sh.m, k)
		}
	}
}

func (s *leaseScratch) reset(n int) {
	s.sub.Reset()
	s.subIdx = s.subIdx[:0]
	s.taken = slices.Grow(s.taken[:0], n)[:n]
	s.local = slices.Grow(s.local[:0], n)[:n]
	s.refill = slices.Grow(s.refill[:0], n)[:n]
	s.room = slices.Grow(s.room[:0], n)[:n]
	clear(s.taken)
	clear(s.local)
	clear(s.refill)
}

// anyLeased reports whether a check of cs has a leased limit.
func anyLeased(cs []limits.Check) bool {
	for i := range cs {
		if cs[i].Limit.Lease > 0 {
			return true
		}
	}
	return false
}

// leasable reports whether check i of cs may use a lease: an enforced
// check (limits.Check.Enforced) of a leasable limit whose key no other
// check of the batch has (such checks see each other's hits in the
// store, which a lease could not), and no usage charge of some hits
// (which the store counts whatever the verdict).
func leasable(cs []limits.Check, i int) bool {
	l := cs[i].Limit
	if l.Lease == 0 || !cs[i].Enforced() || l.Requests == 0 || !l.Algorithm.Leasable() || (cs[i].Usage && cs[i].Hits > 0) {
		return false
	}
	for j := range cs {
		if j != i && cs[j].Key == cs[i].Key {
			return false
		}
	}
	return true
}
