package rlqs

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// bucket is one subscribed bucket of one stream.
type bucket struct {
	// entries is the bucket id, sorted by key; their strings share the
	// one copy of the id the stream's map key holds (see compactEntries),
	// so that an id is held once, and none of the report it came in.
	entries []limits.Entry
	rules   *limits.Ruleset
	plan    plan
	cost    int       // what hold counted for it, less bucketOverhead
	active  time.Time // the last report with requests in it, or the subscription
	last    time.Time // the last report
	// What the last report asked for (allowed and denied), and the time
	// since the one before: grants are sized from them.
	demand   uint64
	interval time.Duration
	// g is the live grant, if g.live, or the last one.
	g       grant
	gen     int32     // grants sent, to tell Envoy each one is new
	push    time.Time // when to assign anew without a report; zero: never
	refresh time.Time // when to send the live grant again (see grant); zero: never
	topUp   bool      // the push replaces the live grant, expected spent by then
	// carry is what the grants replaced since the last report may still
	// have held: the next report's allowed requests may have been spent
	// from them, and are not charged to the grant that replaced them as
	// far as they go.
	carry uint64
	// pushed is whether a grant was pushed since the last report: that
	// report's denials may be from before it reached Envoy.
	pushed bool
	// ret is the last grant replaced since the last report: the next
	// report tells how much of it, at least, was never spent.
	ret giveBack
}

// counted takes in a report of allowed and denied requests at now.
func (b *bucket) counted(allowed, denied uint64, now time.Time) {
	b.demand, b.interval, b.last = allowed+denied, now.Sub(b.last), now
	old := min(allowed, b.carry)
	b.g.used += allowed - old
	b.g.carried += old
	if denied > 0 && b.g.live && !b.pushed {
		// Envoy denies only once its token bucket is empty (or its
		// assignment ended): whatever the count says, the grant is spent,
		// and replaced. (After a push, the denials may be from before it.)
		b.g.spent = true
	}
	b.carry, b.pushed = 0, false
}

// planTopUp is for a live grant that stands: if at the last report's
// rate it runs out before the next report, it is replaced just before it
// is expected to (see topUpAt), losing what is left then, unless the
// limit is running out: there what is lost counts.
func (b *bucket) planTopUp(now time.Time) {
	if left := b.g.left(); b.demand > left && !b.g.capped {
		at := now.Add(topUpAt(b.interval, left, b.demand))
		if at.Before(b.push) || b.push.IsZero() {
			b.push, b.topUp = at, true
		}
	}
}

// wanted sizes b's next grant from the report rate: on a window, twice
// what the last report asked for (allowed and denied), so that a steady
// Envoy spends it over two reports; on a bucket, what it asks for in one
// grant's time to live, and a quarter more. At least a quarter of the
// lease (one hit if nothing was asked, so that the next request is not
// denied while a bucket that is not used holds little), at most all of
// it.
func (b *bucket) wanted() uint64 {
	p := &b.plan
	most := leaseOf(p.rule)
	want := 2 * b.demand
	if p.ttl > 0 {
		want = mulDiv(b.demand, uint64(p.ttl+p.ttl/4), uint64(max(b.interval, time.Second)))
	}
	if b.demand == 0 {
		want = 1
	} else {
		want = max(want, most/4)
	}
	return min(max(want, 1), most)
}

// ownHits is how many hits a grant on l takes as the check's own, beyond
// which the store grants at most half of what is left: one on a sliding
// window, so that the fleet can take its limit's last hit (every
// grant in its window's last whole second takes the room that grew
// since the fleet's last asks, and a hit left each time is lost to the
// window); none on the others.
func ownHits(l *limits.Limit) uint64 {
	if l.Algorithm == limits.SlidingWindow {
		return 1
	}
	return 0
}

// withOwn counts the own hits a window grant's check took (see ownHits)
// in out.Granted. A store that granted none beyond them leaves GrantFor
// and GrantReceipt unset: they are the window's end and its start, by
// the store's clock, which the sliding window's Reset tells (the end of
// the next window, where the current count expires), and now (the
// sidecar's clock, off by far less than half a window) places.
func withOwn(l *limits.Limit, out limits.Outcome, own uint64, now time.Time) limits.Outcome {
	if out.Granted == 0 {
		w := l.Window()
		out.GrantFor = out.Reset - w
		if out.GrantFor <= 0 || out.GrantFor > w {
			out.GrantFor = windowLeft(l, now) // not a sliding window's reset
		}
		wus := w.Microseconds()
		end := (now.UnixMicro() + out.GrantFor.Microseconds() + wus/2) / wus * wus
		out.GrantReceipt = end - wus
	}
	out.Granted += own
	return out
}

// grantTTL sets until when b's new grant, out, may be spent and when it
// is pushed again, and returns the time to live to send Envoy; not ok
// when that is under a whole second.
//
// A bucket's grant (its plan's ttl) is pushed the margin before it
// ends, so that the next reaches Envoy in time; but one shorter than
// twice the margin is pushed at three quarters of its time to live
// instead, not replaced as soon as it is sent. A window's grant is
// spent until the store's GrantFor, and lives for Envoy until the margin
// before that.
func (b *bucket) grantTTL(out limits.Outcome, now time.Time, clock func() time.Time, margin time.Duration) (time.Duration, bool) {
	if ttl := b.plan.ttl; ttl > 0 {
		b.g.until = now.Add(ttl)
		b.push = b.g.until.Add(-min(margin, ttl/4))
		return ttl, true
	}
	b.push = now.Add(out.GrantFor + pushDelay)
	b.g.until = now.Add(out.GrantFor)
	ttl := b.g.ttl(clock(), margin) // after the store's round trip
	return ttl, ttl >= time.Second
}

// hold makes t, taken when b wanted want, b's live grant, and sets when
// it is topped up.
//
// A grant the last report's rate spends before the next report (the
// lease is smaller than what Envoy spends in an interval) is topped up
// just before that time (topUpAt), and so on, so that one Envoy's rate is
// not capped at a lease per report. On a sliding window that granted
// less than asked, room regrows as the previous window's weight fades:
// it is asked again once the grant is expected spent, but not before
// regrowEvery, instead of only at the next report.
func (b *bucket) hold(t taken, want uint64, now time.Time, margin time.Duration) {
	p := &b.plan
	g := min(t.out.Granted, math.MaxUint32)
	b.g.start(t, p.key, g, t.out.Granted < want, p.ttl > 0, margin)
	var at time.Time
	switch {
	case !b.g.capped && b.demand > g:
		at = now.Add(topUpAt(b.interval, g, b.demand))
	case b.g.capped && p.rule.Algorithm == limits.SlidingWindow && b.demand > 0:
		at = regrowAt(p.rule, now, regrowEvery(p.rule), topUpAt(b.interval, g, b.demand), margin)
	}
	if !at.IsZero() && (b.push.IsZero() || at.Before(b.push)) {
		b.push, b.topUp = at, true
	}
	b.gen = b.gen%maxGen + 1
}

// replaced notes that b's live grant, if any, is being replaced (by a
// push when pushed): what it had left may have been spent since the last
// report, which the next report tells. Envoy spent from it, after the
// last report, about what the report allowed per second until it could
// spend no more: those requests of the next report are not charged to
// the new grant (carry). Too little carry charges the new grant early
// and replaces it early (what it held goes back); too much would leave
// Envoy denied while the server thinks it holds quota.
func (b *bucket) replaced(now time.Time, pushed bool, margin time.Duration) {
	if !b.g.live {
		return
	}
	left := b.g.left()
	b.g.spent = false
	if pushed {
		b.pushed = true
		end := now
		if b.g.end.Before(end) {
			end = b.g.end
		}
		if spent := end.Sub(b.last); spent > 0 {
			b.carry += min(left, mulDiv(b.demand, uint64(spent), uint64(max(b.interval, time.Second))))
		}
	}
	if r := b.g.unspent(); b.g.from == fromShared && r > 0 {
		b.ret = b.g.back(r, now.Add(margin))
		if !b.g.limit.Algorithm.Bucketed() {
			b.ret.ends = b.g.dead
		}
	}
}

// pushDelay is how long after a window's end, as the sidecar's clock
// puts it, a new grant is pushed: the store decides by its own clock,
// which the window's end was read from one round trip before.
const pushDelay = 50 * time.Millisecond

// refreshEarly is how much sooner than exactly a second before the margin
// a refresh is timed: a timer that fires a little late still finds a
// whole second to send.
const refreshEarly = 100 * time.Millisecond

// dryFor is how long a limit that granted nothing at now is denied:
// on a bucket, until two hits have refilled (a grant takes at most half
// of what is left); on a window until it has room again, but never past
// the current window's end, so that no denial outlives the window it
// was decided in (a sliding window is asked again sooner, by a push:
// see regrowEvery). Whole seconds, at least one.
func dryFor(l *limits.Limit, out limits.Outcome, now time.Time) time.Duration {
	if !l.Algorithm.Bucketed() {
		return max(min(out.Reset, windowLeft(l, now)), time.Second)
	}
	if out.Over {
		return out.Reset
	}
	need := 2 - min(out.Remaining, 2)
	per := l.Window() / time.Duration(max(l.Requests, 1))
	d := time.Duration(need) * per
	return (d + time.Second - 1).Truncate(time.Second)
}

// topUpAt is when a grant of left hits, which a demand per interval
// spends before the next report, is replaced: at fifteen sixteenths of
// the time the demand takes to spend it, so that at a steady rate the
// push lands before Envoy runs out (a rate up to 6% higher still does
// not) and what it replaces is a sixteenth of the grant, not a quarter.
// A demand of few requests says little of the rate (the count of
// requests at a steady rate varies by about its square root), so the
// push leaves half that much more in hand: a quarter of the time for a
// demand of 4, a sixteenth from a demand of 64.
func topUpAt(interval time.Duration, left, demand uint64) time.Duration {
	life := float64(mulDiv(uint64(max(interval, time.Second)), left, demand))
	lead := max(1.0/16, 0.5/math.Sqrt(float64(demand)))
	return time.Duration(life * (1 - lead))
}

// regrowEvery is how often a sliding window l that is running out is
// asked again for the room that the previous window's fading weight
// leaves: a twentieth of the window, at least regrowMin, so that about a
// twentieth of the previous window's count regrows in between.
func regrowEvery(l *limits.Limit) time.Duration {
	return max(l.Window()/20, regrowMin)
}

// regrowAt is when a sliding window l that is running out at now is
// asked again: after wait, and once the live grant is expected spent (in
// spent; 0 without one). The room its previous window's weight leaves
// grows until the window ends, but only what is granted by lastAsk can
// be spent in it. So an ask due within half a regrowEvery of lastAsk, or
// after it, is made at lastAsk instead, if the grant is spent by then:
// the window's last ask takes all the room that grew until then.
func regrowAt(l *limits.Limit, now time.Time, wait, spent, margin time.Duration) time.Time {
	at := now.Add(max(wait, spent))
	last := lastAsk(l, now, margin)
	if now.Before(last) && !now.Add(spent).After(last) && at.After(last.Add(-regrowEvery(l)/2)) {
		return last
	}
	return at
}

// lastAsk is the last moment of l's window at now that a grant can be
// taken with a whole second to live before the margin (see grant), less
// refreshEarly, so that a timer that fires a little late still finds it.
func lastAsk(l *limits.Limit, now time.Time, margin time.Duration) time.Time {
	return now.Add(windowLeft(l, now) - margin - time.Second - refreshEarly)
}

// regrowMin bounds how often a sliding window running out is asked
// again: one Redis call per bucket and stream at most this often.
const regrowMin = 500 * time.Millisecond

// windowLeft is how long l's current window has left at now, by the
// sidecar's clock: windows start at multiples of their length since the
// Unix epoch, as the store counts them.
func windowLeft(l *limits.Limit, now time.Time) time.Duration {
	w := l.Window()
	if w <= 0 {
		return 0
	}
	since := time.Duration(now.UnixNano() % int64(w))
	return w - since
}

// mulDiv is a×b/c rounded down, saturating.
func mulDiv(a, b, c uint64) uint64 {
	q, _ := divMul(a, b, c)
	return q
}

// ceilMulDiv is a×b/c rounded up, saturating.
func ceilMulDiv(a, b, c uint64) uint64 {
	q, exact := divMul(a, b, c)
	if !exact && q < math.MaxUint64 {
		q++
	}
	return q
}

func divMul(a, b, c uint64) (q uint64, exact bool) {
	hi, lo := bits.Mul64(a, b)
	if c == 0 || hi >= c {
		return math.MaxUint64, false
	}
	q, r := bits.Div64(hi, lo, c)
	return q, r == 0
}

// leaseOf is the most one grant takes: the limit's lease, else a tenth
// of the limit.
func leaseOf(l *limits.Limit) uint64 {
	if l.Lease > 0 {
		return l.Lease
	}
	return max(l.Requests/10, 1)
}

// entriesOf turns a bucket id into descriptor entries, sorted by key.
func entriesOf(id *rlqspb.BucketId) ([]limits.Entry, error) {
	m := id.GetBucket()
	if len(m) == 0 {
		return nil, errors.New("bucket_id.bucket: must not be empty")
	}
	ents := make([]limits.Entry, 0, len(m))
	for k, v := range m {
		if k == "" {
			return nil, errors.New("bucket_id.bucket: empty key")
		}
		ents = append(ents, limits.Entry{Key: k, Value: v})
	}
	slices.SortFunc(ents, func(a, b limits.Entry) int { return strings.Compare(a.Key, b.Key) })
	return ents, nil
}

// bucketKey is an injective string for sorted entries.
func bucketKey(ents []limits.Entry) string {
	var b []byte
	for _, e := range ents {
		b = strconv.AppendInt(b, int64(len(e.Key)), 10)
		b = append(b, ':')
		b = append(b, e.Key...)
		b = strconv.AppendInt(b, int64(len(e.Value)), 10)
		b = append(b, ':')
		b = append(b, e.Value...)
	}
	return string(b)
}

// compactEntries returns the n entries key was built from (bucketKey),
// as substrings of key: the id's one copy.
func compactEntries(key string, n int) []limits.Entry {
	ents := make([]limits.Entry, 0, n)
	next := func() string {
		i := strings.IndexByte(key, ':')
		l, _ := strconv.Atoi(key[:i])
		v := key[i+1 : i+1+l]
		key = key[i+1+l:]
		return v
	}
	for len(key) > 0 {
		k := next()
		ents = append(ents, limits.Entry{Key: k, Value: next()})
	}
	return ents
}

// bucketID is b's id, built again from its entries for an answer.
func (b *bucket) bucketID() *rlqspb.BucketId {
	m := make(map[string]string, len(b.entries))
	for _, e := range b.entries {
		m[e.Key] = e.Value
	}
	return &rlqspb.BucketId{Bucket: m}
}

// blanket is an assignment of rule for ttl, in whole seconds (Envoy
// reads only the seconds), at least one.
func blanket(id *rlqspb.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assign(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, max(ttl, time.Second))
}

// tokenBucket assigns a token bucket of n tokens that Envoy can spend
// once: it starts full and refills one token per fill interval, which is
// longer than the time to live (every is), so within it it refills none.
// gen, in the interval's nanoseconds, makes every grant a new strategy:
// Envoy keeps its current token bucket when an assignment repeats it.
func tokenBucket(id *rlqspb.BucketId, n uint64, every time.Duration, gen int32, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	tb := &typev3.TokenBucket{
		MaxTokens:     uint32(n),
		TokensPerFill: wrapperspb.UInt32(1),
		FillInterval:  &durationpb.Duration{Seconds: int64(every/time.Second) + 1, Nanos: gen},
	}
	return assign(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, ttl)
}

// maxGen bounds a grant's number (bucket.gen): it is sent as the
// nanoseconds of a token bucket's fill interval, which a Duration holds up
// to 999,999,999 (see tokenBucket).
const maxGen = 999_999_999

// abandon tells Envoy to drop a bucket.
func abandon(id *rlqspb.BucketId) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

func assign(id *rlqspb.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: &durationpb.Duration{Seconds: int64(ttl / time.Second)},
				RateLimitStrategy:    strategy,
			},
		},
	}
}
