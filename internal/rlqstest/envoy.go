// Package rlqstest plays Envoy's rate_limit_quota HTTP filter on one
// Rate Limit Quota Service stream, for tests and benchmarks of the
// server.
package rlqstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Envoy plays the filter as its source (global_client_impl.cc, read at
// envoyproxy/envoy main of 2025) does: a bucket's first request is
// decided by no_assignment_behavior and sends the bucket's first report,
// its subscription, unless the stream is down: then the bucket first
// appears in the next report. Report sends every bucket's usage, as the
// reporting timer does. Every message carries the domain, and each
// bucket's time_elapsed in whole seconds (truncated, so 0 with counts
// for a bucket created within a second of the report). A token bucket
// assignment starts full and is kept when an assignment repeats it
// exactly (max_tokens, tokens_per_fill and fill_interval's nanos); one
// that replaces another token bucket starts with floor(max_tokens ×
// remaining / old max_tokens) tokens, so a share under one token starts
// empty; it refills at tokens_per_fill per whole seconds of
// fill_interval. Actions apply in order, so a blanket rule before a token
// bucket in one message makes it start full. Every action restarts the
// assignment's expiry timer, a blanket rule included: it expires after
// the whole seconds of its time to live, and the bucket then falls back
// to no_assignment_behavior (no expired_assignment_behavior is
// configured). requests_per_time_unit is ignored by Envoy; receiving one
// is an error here.
//
// Discarded counts the tokens Envoy held in token buckets that another
// assignment replaced (less what a replacing token bucket kept): quota
// the server granted that Envoy could no longer spend.
//
// Time is what Now returns. Every message the server sends is applied as
// it arrives, by a goroutine of the Envoy's own: answers to reports, and
// assignments the server pushes at any time. Report waits for a message
// after it sends, normally the answer. An Envoy is safe for concurrent
// use.
type Envoy struct {
	now    func() time.Time
	domain string
	allow  bool // no_assignment_behavior is ALLOW_ALL

	mu       sync.Mutex
	cond     *sync.Cond // signalled when a message is applied or the stream ends
	stream   rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel   context.CancelFunc
	done     chan struct{} // closed when the receiving goroutine ends
	recvErr  error         // why the stream ended, once it has
	ended    bool          // the stream ended: a new bucket sends no subscription
	bucks    map[string]*bucket
	received int // messages applied
	pushes   int // messages the server pushed, as Sync was told
	// reports counts the reports sent (subscriptions included) and
	// assignments the quota assignments received.
	reports, assignments int
	discarded            float64 // see Discarded
}

// Options tunes an Envoy. The zero value is ready to use.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AllowWithoutAssignment makes no_assignment_behavior ALLOW_ALL
	// instead of DENY_ALL.
	AllowWithoutAssignment bool
}

type bucket struct {
	id              map[string]string
	allowed, denied uint64
	assigned        bool
	expires         time.Time
	strategy        *typev3.RateLimitStrategy
	tokens          float64 // of a token bucket strategy
	rate            float64 // tokens per second
	last            time.Time
	reported        time.Time // the bucket's last report, or its creation
}

// Dial opens a stream on conn for domain.
func Dial(ctx context.Context, conn grpc.ClientConnInterface, domain string, o Options) (*Envoy, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	e := &Envoy{now: o.Now, domain: domain, allow: o.AllowWithoutAssignment, bucks: make(map[string]*bucket)}
	e.cond = sync.NewCond(&e.mu)
	if err := e.open(ctx, conn); err != nil {
		return nil, err
	}
	return e, nil
}

// open starts a stream on conn and the goroutine that receives on it.
func (e *Envoy) open(ctx context.Context, conn grpc.ClientConnInterface) error {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	e.mu.Lock()
	e.stream, e.cancel, e.done, e.recvErr, e.ended = stream, cancel, done, nil, false
	e.mu.Unlock()
	go e.receive(stream, done)
	return nil
}

// receive applies every message of stream until it ends.
func (e *Envoy) receive(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, done chan struct{}) {
	defer close(done)
	for {
		resp, err := stream.Recv()
		e.mu.Lock()
		if err != nil {
			e.recvErr, e.ended = fmt.Errorf("receive: %w", err), true
			e.cond.Broadcast()
			e.mu.Unlock()
			return
		}
		for _, a := range resp.GetBucketAction() {
			if err := e.apply(a); err != nil && e.recvErr == nil {
				e.recvErr = err
			}
		}
		e.received++
		e.cond.Broadcast()
		e.mu.Unlock()
	}
}

// Err returns why the stream ended, or nil while it is open. A stream
// the server refuses at once (Unimplemented, say) can end before the
// first request, which then sends nothing (as Envoy, whose stream is
// down), so a test of a refusal reads it here.
func (e *Envoy) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ended {
		return nil
	}
	return e.recvErr
}

// Close ends the stream.
func (e *Envoy) Close() {
	e.mu.Lock()
	stream, cancel, done := e.stream, e.cancel, e.done
	e.mu.Unlock()
	_ = stream.CloseSend()
	cancel()
	<-done
}

// Reconnect ends the stream and opens a new one on conn, keeping the
// buckets and their assignments, as Envoy does when its stream breaks:
// the next report goes out on the new stream, with the domain.
func (e *Envoy) Reconnect(ctx context.Context, conn grpc.ClientConnInterface) error {
	e.Close()
	return e.open(ctx, conn)
}

// Counts returns the reports sent (subscriptions included), the
// messages received, and the quota assignments among them.
func (e *Envoy) Counts() (reports, received, assignments int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reports, e.received, e.assignments
}

// waitLocked waits, with mu held, until n messages have been received.
func (e *Envoy) waitLocked(n int, timeout time.Duration) error {
	t := time.AfterFunc(timeout, func() {
		e.mu.Lock()
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	defer t.Stop()
	deadline := time.Now().Add(timeout)
	for e.received < n {
		if e.recvErr != nil {
			return e.recvErr
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%d messages received after %s, want %d", e.received, timeout, n)
		}
		e.cond.Wait()
	}
	return e.recvErr
}

// Request decides one request into the bucket id and reports whether it
// was allowed. A bucket's first request subscribes it, and returns the
// error of that exchange.
func (e *Envoy) Request(id map[string]string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := Key(id)
	b := e.bucks[k]
	if b == nil {
		b = &bucket{id: id, reported: e.now()}
		e.bucks[k] = b
		ok := e.allow
		if ok {
			b.allowed = 1
		} else {
			b.denied = 1
		}
		if e.ended {
			// Envoy logs that the stream is closed and sends nothing:
			// the bucket first appears in the next report.
			return ok, nil
		}
		return ok, e.send([]*bucket{b})
	}
	ok := b.decide(e.now(), e.allow)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok, nil
}

// Report sends every bucket's usage since its last report and applies
// the server's answer.
func (e *Envoy) Report() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	bs := make([]*bucket, 0, len(e.bucks))
	for _, b := range e.bucks {
		bs = append(bs, b)
	}
	if len(bs) == 0 {
		return nil
	}
	return e.send(bs)
}

// Strategy returns the bucket's assignment in force, or nil.
func (e *Envoy) Strategy(id map[string]string) *typev3.RateLimitStrategy {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.bucks[Key(id)]
	if b == nil || !b.assigned || !e.now().Before(b.expires) {
		return nil
	}
	return b.strategy
}

// Discarded returns the tokens Envoy held in token buckets when other
// assignments replaced them, less what a replacing token bucket started
// with: quota granted and lost without being spent.
func (e *Envoy) Discarded() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.discarded
}

// Buckets returns how many buckets the Envoy holds.
func (e *Envoy) Buckets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.bucks)
}

// send reports bs, with mu held, and waits for a message in answer.
func (e *Envoy) send(bs []*bucket) error {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: e.domain}
	now := e.now()
	for _, b := range bs {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: b.id}, NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
			TimeElapsed: &durationpb.Duration{Seconds: int64(now.Sub(b.reported) / time.Second)},
		})
		b.allowed, b.denied, b.reported = 0, 0, now
	}
	if err := e.stream.Send(msg); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream; why is for Recv to tell.
			if err := e.waitLocked(math.MaxInt, 10*time.Second); err != nil {
				return err
			}
		}
		return fmt.Errorf("send report: %w", err)
	}
	e.reports++ // a report that never left is answered by no one
	// The server answers every report, and may push between reports: a
	// test that knows how many it pushed (Sync) waits for exactly the
	// answer; otherwise a push can stand for it.
	return e.waitLocked(max(e.reports+e.pushes, e.received+1), 10*time.Second)
}

// Sync waits until the server's answers to every report, and pushes
// messages pushed in all to this Envoy's streams, have been applied.
func (e *Envoy) Sync(pushes int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pushes = pushes
	return e.waitLocked(e.reports+pushes, 10*time.Second)
}

func (e *Envoy) apply(a *rlqspb.RateLimitQuotaResponse_BucketAction) error {
	k := Key(a.GetBucketId().GetBucket())
	b := e.bucks[k]
	if b == nil {
		return fmt.Errorf("action for a bucket never reported: %v", a.GetBucketId())
	}
	if a.GetAbandonAction() != nil {
		delete(e.bucks, k)
		return nil
	}
	qa := a.GetQuotaAssignmentAction()
	s := qa.GetRateLimitStrategy()
	switch s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_, *typev3.RateLimitStrategy_TokenBucket:
	default:
		return fmt.Errorf("bucket %v assigned %v: Envoy applies only blanket_rule and token_bucket", b.id, s)
	}
	now := e.now()
	if b.assigned && !now.Before(b.expires) {
		b.assigned, b.strategy = false, nil
	}
	old := b.strategy.GetTokenBucket()
	tb := s.GetTokenBucket()
	if old != nil {
		b.refill(now)
	}
	switch {
	case tb == nil:
		if old != nil {
			e.discarded += b.tokens // a blanket rule drops the token bucket
		}
	case tb.GetFillInterval().GetSeconds() < 1 || tb.GetTokensPerFill().GetValue() == 0:
		return fmt.Errorf("bucket %v: token bucket %v refills in under a second or never", b.id, tb)
	case old == nil || old.GetMaxTokens() != tb.GetMaxTokens() ||
		old.GetTokensPerFill().GetValue() != tb.GetTokensPerFill().GetValue() ||
		old.GetFillInterval().GetNanos() != tb.GetFillInterval().GetNanos():
		// A new token bucket starts full, unless it replaces one: then it
		// starts with the old one's share of its max, rounded down.
		start := float64(tb.GetMaxTokens())
		if old != nil {
			start = math.Floor(start * (b.tokens / float64(old.GetMaxTokens())))
			e.discarded += max(b.tokens-start, 0)
		}
		b.tokens = start
		b.rate = float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().GetSeconds())
		b.last = now
	}
	e.assignments++
	b.assigned, b.strategy = true, s
	b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	return nil
}

// decide decides one request as the bucket's assignment says.
func (b *bucket) decide(now time.Time, allow bool) bool {
	if b.assigned && !now.Before(b.expires) {
		b.assigned, b.strategy = false, nil
	}
	if !b.assigned {
		return allow // no_assignment_behavior
	}
	if tb := b.strategy.GetTokenBucket(); tb != nil {
		b.refill(now)
		if b.tokens < 1 {
			return false
		}
		b.tokens--
		return true
	}
	return b.strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
}

// refill adds the tokens a token bucket strategy refilled since last.
func (b *bucket) refill(now time.Time) {
	if tb := b.strategy.GetTokenBucket(); tb != nil {
		b.tokens = min(float64(tb.GetMaxTokens()), b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// Key is a string that names a bucket id.
func Key(id map[string]string) string {
	return (&rlqspb.BucketId{Bucket: id}).String()
}

// Describe names a strategy for test messages and comparisons: "no
// assignment", "token_bucket of N tokens", "an empty strategy", or the
// blanket rule (ALLOW_ALL, DENY_ALL).
func Describe(s *typev3.RateLimitStrategy) string {
	switch {
	case s == nil:
		return "no assignment"
	case s.GetTokenBucket() != nil:
		return fmt.Sprintf("token_bucket of %d tokens", s.GetTokenBucket().GetMaxTokens())
	case s.GetStrategy() == nil:
		return "an empty strategy"
	}
	return s.GetBlanketRule().String()
}
