package rlqs

import (
	"context"
	"errors"
	"io"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
}

// Returner takes back hits granted for quota that was not assigned
// (store.Returner's contract); the Redis store is one.
type Returner interface {
	Return(ctx context.Context, checks []limits.Check, receipts []int64) error
}

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
	// MaxBuckets bounds the buckets one stream may subscribe to. Zero
	// means 10,000.
	MaxBuckets int
	// Return, if set, takes back quota taken from the store but not
	// assigned (a grant too close to its window's end); nil: those hits
	// end with their window.
	Return Returner
}

// Server serves RateLimitQuotaService. It is safe for concurrent use;
// each stream is served by its own goroutine, the one gRPC runs it on.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	rules Rules
	store limits.Store
	ret   Returner // nil: hits of grants too late to assign end with their window
	log   *zap.Logger
	o     Options
}

// NewServer returns a Server that assigns quota taken from st, a shared
// store that grants hits for leases (limits.Check.Extra), under the rules
// rules holds.
func NewServer(rules Rules, st limits.Store, log *zap.Logger, o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Margin <= 0 {
		o.Margin = time.Second
	}
	if o.BlanketTTL <= 0 {
		o.BlanketTTL = 10 * time.Second
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = 10_000
	}
	return &Server{rules: rules, store: st, ret: o.Return, log: log, o: o}
}

// Register registers the service on g.
func (s *Server) Register(g *grpc.Server) {
	rlqspb.RegisterRateLimitQuotaServiceServer(g, s)
}

// StreamRateLimitQuotas serves one Envoy's stream: it answers every
// usage report with one response, holding the actions for the buckets
// whose assignment changed (none when nothing did).
func (s *Server) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := stream.Context()
	st := &streamState{buckets: make(map[string]*bucket)}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.domain == "" {
			if msg.GetDomain() == "" {
				return status.Error(codes.InvalidArgument, "domain: must be set in the first message")
			}
			st.domain = msg.GetDomain()
		}
		resp := &rlqspb.RateLimitQuotaResponse{}
		for i, u := range msg.GetBucketQuotaUsages() {
			a, err := s.report(ctx, st, u)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].%v", i, err)
			}
			if a != nil {
				resp.BucketAction = append(resp.BucketAction, a)
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// streamState is one stream's buckets. Only the stream's goroutine
// touches it.
type streamState struct {
	domain  string
	buckets map[string]*bucket // by bucketKey
}
