package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Rules gives the ruleset in use and each domain's failure mode;
// *limits.Engine is one, so RLQS follows the RLS path's reloads.
type Rules interface {
	Rules() *limits.Ruleset
	FailureMode(domain string) limits.FailureMode
	// Validate checks a request against the RLS path's request limits;
	// a new bucket is checked as the descriptor it is matched as.
	Validate(req *limits.Request) error
	// ApplyLocal decides a batch on the local store, each limit divided
	// by the replicas sharing it, as failure mode local does.
	ApplyLocal(ctx context.Context, b *limits.Batch) error
}

// Metrics is told what the server does. Its methods must be fast and
// safe for concurrent use. domain is a domain of the rules in use, or ""
// for one they do not define (Envoy names domains, so a label made of
// any name it sends would be unbounded).
type Metrics interface {
	// Streams and Buckets count streams and subscribed buckets, up by 1
	// or down by 1 or more.
	Streams(delta int)
	Buckets(delta int)
	// Usage is what a report says Envoy decided by itself.
	Usage(domain string, allowed, denied uint64)
	// Assigned counts an action sent: token_bucket, allow_all, deny_all
	// or abandon, and why: grant or local (a token bucket from the
	// shared or the local store), dry, window_ending, store_error,
	// no_rule, unsupported, refused (past MaxBuckets or the request
	// bounds), idle, share. An abandon's reason is idle for a kept
	// bucket, or share when its connection gives back what it held past
	// its share (share.go), and for one that is not kept why it is not
	// (no_rule, unsupported, dry, refused).
	Assigned(domain, action, reason string)
	// Granted counts hits assigned in token buckets, from the local
	// store when local is true.
	Granted(domain string, hits uint64, local bool)
	// Pushed counts a message sent between reports.
	Pushed()
	// Returned counts hits of grants given back to the shared store,
	// unspent.
	Returned(domain string, hits uint64)
}

type noMetrics struct{}

func (noMetrics) Streams(int)                     {}
func (noMetrics) Buckets(int)                     {}
func (noMetrics) Usage(string, uint64, uint64)    {}
func (noMetrics) Assigned(string, string, string) {}
func (noMetrics) Granted(string, uint64, bool)    {}
func (noMetrics) Pushed()                         {}
func (noMetrics) Returned(string, uint64)         {}

// Options tunes a Server. The zero value is ready to use.
type Options struct {
	// Now is the clock assignments are timed by; nil means time.Now.
	Now func() time.Time
	// Margin is how long an assignment may take to reach Envoy and be
	// applied: an assignment's time to live ends at least Margin before
	// the window its quota was taken in. Zero means 1s.
	Margin time.Duration
	// BlanketTTL is the time to live of ALLOW_ALL and DENY_ALL answers
	// that do not come from a limit's state (no rule, an unsupported
	// rule, the store down). They are sent again with every report, so
	// it only matters when the stream stops. Zero means 10s.
	BlanketTTL time.Duration
	// BucketTTL is the longest time to live of a grant on a token or
	// leaky bucket (whole seconds; see bucketPlan): Envoy's
	// reporting_interval should be at most this, or its buckets go
	// without an assignment between a grant's end and the next report.
	// Every sidecar of a fleet must use the same. Zero means 6s: Envoy
	// reports every 5s, and a second more bridges to the next report.
	BucketTTL time.Duration
	// MaxBuckets bounds the buckets one stream may subscribe to. Zero
	// means 10,000.
	MaxBuckets int
	// MaxTotalBuckets and MaxTotalBytes bound the buckets all streams
	// together hold, by count and by the bytes of their ids (each
	// counted with bucketOverhead for the state beside it), so that
	// many streams cannot together hold more than the process can. A
	// new bucket past either is refused like one past MaxBuckets,
	// unless its connection is within its share of them (share.go).
	// Zero means 50,000 and 32 MiB.
	MaxTotalBuckets int
	MaxTotalBytes   int64
	// IdleAfter is how long a bucket may report no requests before it is
	// abandoned: Envoy drops it, and subscribes again at its next
	// request, which is decided by its no_assignment_behavior (denied,
	// where that is DENY_ALL). Zero means 1 minute, twelve of Envoy's 5s
	// reports: buckets keyed per user or per address leave Envoy's report
	// a minute after their last use, and only a bucket quiet for a minute
	// pays for it with a request decided without quota. (Buckets that are
	// not kept, those not served from a limit or refused, are abandoned
	// at their first report without requests.)
	IdleAfter time.Duration
	// Metrics, if set, is told what the server does.
	Metrics Metrics
	// AfterFunc runs f after d, on Now's clock, unless stop is called
	// first; nil means time.AfterFunc. Pushes between reports are timed
	// by it.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Tracer, if set, traces each message the server handles (a report,
	// or the pushes of one timer): a span named "rlqs report" or "rlqs
	// push" with the attributes ratelimit.domain, rlqs.buckets (the
	// buckets the message reports or the push considered) and
	// rlqs.actions (the actions sent). The store's calls get its context,
	// so that a store traces its round trips beneath it.
	Tracer trace.Tracer
	// Return, if set, takes back quota taken from the store but not
	// assigned (a grant too close to its window's end); nil: those hits
	// end with their window.
	Return limits.Returner
}

// Server serves RateLimitQuotaService. It is safe for concurrent use;
// each stream is served by its own goroutine, the one gRPC runs it on.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	rules Rules
	store limits.Store
	ret   limits.Returner // nil: hits of grants too late to assign end with their window
	log   *zap.Logger
	o     Options
	m     Metrics
	plans planner

	// held and heldBytes are the buckets all streams hold, and what
	// they count against MaxTotalBytes (see hold).
	held, heldBytes atomic.Int64
	fullLogged      atomic.Bool // a refusal for ErrServerFull was logged

	// hmu guards the holders, each connection's share of held and
	// heldBytes (share.go), by holderKey.
	hmu     sync.Mutex
	holders map[string]*holder

	mu    sync.Mutex
	noted *limits.Ruleset // the last ruleset noteRules logged about
}

// bucketOverhead is what a bucket is counted beside its id's bytes: its
// state, its entries and its place in the stream's map, roughly.
const bucketOverhead = 512

// ErrServerFull is why a bucket past MaxTotalBuckets or MaxTotalBytes is
// refused.
var ErrServerFull = errors.New("bucket_id: the server holds its most rlqs buckets across streams")

// noteRules logs, once per ruleset, the rules RLQS cannot serve from a
// limit, when a stream first uses it: their buckets get the domain's
// failure mode, which an operator should learn at deploy, not from the
// first bucket that matches one.
func (s *Server) noteRules(rs *limits.Ruleset) {
	s.mu.Lock()
	if s.noted == rs {
		s.mu.Unlock()
		return
	}
	s.noted = rs
	s.mu.Unlock()
	if u := s.plans.unserved(rs); len(u) > 0 {
		s.log.Warn("rlqs cannot serve these rules from their limits; buckets that match them get the domain's failure mode",
			zap.Strings("rules", u))
	}
}

// withDefaults is o with every zero field that has a default set to it.
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Margin <= 0 {
		o.Margin = time.Second
	}
	if o.BlanketTTL <= 0 {
		o.BlanketTTL = 10 * time.Second
	}
	if o.BucketTTL < time.Second {
		o.BucketTTL = 6 * time.Second
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = 10_000
	}
	if o.MaxTotalBuckets <= 0 {
		o.MaxTotalBuckets = 50_000
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = 32 << 20
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = time.Minute
	}
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return o
}

// Validate reports the first of BucketTTL, Margin, MaxBuckets and
// IdleAfter out of the range the sidecar's --rlqs-* flags allow, naming
// the flag. It checks o as given, before defaults: a zero that NewServer
// would replace by its default is refused, as the flags are never zero
// unless set so.
func (o *Options) Validate() error {
	switch {
	case o.BucketTTL < time.Second || o.BucketTTL%time.Second != 0:
		return fmt.Errorf("--rlqs-bucket-ttl: want whole seconds, at least 1s (Envoy reads an assignment's time to live in whole seconds), got %s", o.BucketTTL)
	case o.Margin < 10*time.Millisecond || o.Margin > time.Minute:
		return fmt.Errorf("--rlqs-margin: want 10ms to 1m, got %s", o.Margin)
	case o.MaxBuckets < 1:
		return fmt.Errorf("--rlqs-max-buckets: want 1 or more, got %d", o.MaxBuckets)
	case o.IdleAfter <= 0:
		return fmt.Errorf("--rlqs-idle-after: want more than 0, got %s", o.IdleAfter)
	}
	return nil
}

// NewServer returns a Server that assigns quota taken from st, a shared
// store that grants hits for leases (limits.Check.Extra), under the rules
// rules holds.
func NewServer(rules Rules, st limits.Store, log *zap.Logger, o Options) *Server {
	o = o.withDefaults()
	m := o.Metrics
	if m == nil {
		m = noMetrics{}
	}
	return &Server{rules: rules, store: st, ret: o.Return, log: log, o: o, m: m, plans: o.planner(rules.FailureMode), holders: map[string]*holder{}}
}

// ServiceName is the service's full name, for gRPC health checks.
const ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Register serves RLQS on g: a Server (see NewServer) that assigns quota
// taken from st under the rules rules holds, tuned by o. It returns the
// server, which holds no goroutine of its own: a stream's state and
// timers end with the stream, so stopping g is all shutdown must do.
func Register(g *grpc.Server, rules Rules, st limits.Store, log *zap.Logger, o Options) *Server {
	s := NewServer(rules, st, log, o)
	rlqspb.RegisterRateLimitQuotaServiceServer(g, s)
	return s
}

// StreamRateLimitQuotas serves one Envoy's stream: it answers every
// usage report with one response, holding the actions for the buckets
// whose assignment changed (none when nothing did), and pushes new
// assignments when a busy bucket's grant ends between reports (see
// push).
func (s *Server) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st := &streamState{srv: s, ctx: stream.Context(), send: stream.Send, buckets: make(map[string]*bucket)}
	st.h = s.join(st.ctx)
	s.m.Streams(1)
	defer func() {
		st.mu.Lock()
		st.closed = true
		if st.stop != nil {
			st.stop()
		}
		n := len(st.buckets)
		for _, b := range st.buckets {
			s.release(st.h, b.cost)
		}
		st.buckets = nil
		st.mu.Unlock()
		s.leave(st.ctx, st.h)
		s.m.Streams(-1)
		s.m.Buckets(-n)
	}()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.serveReport(msg); err != nil {
			return err
		}
	}
}
