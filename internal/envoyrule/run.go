package envoyrule

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Mode is how a path answers while its store is as the path set it up.
type Mode uint8

// The modes.
const (
	// Decided: a store decides (memory, Redis, their middleware, or the
	// local fallback); every step must select its Want.
	Decided Mode = iota
	// Open: the store is down and the domain fails open: every request
	// is admitted and no status has a limit.
	Open
	// Closed: the store is down and the domain fails closed: every
	// request is rejected, leading Envoy to one of its limits with a
	// reset of limits.ClosedReset.
	Closed
	// Error: the store is down and the call fails with Unavailable.
	Error
)

// Path is one way requests get decided: a store, the engine options
// around it, and how it answers.
type Path struct {
	Store  limits.Store
	Engine limits.EngineOptions
	Mode   Mode
	// Answered, if set, counts the requests a deny cache answered
	// without its store: Run sends every rejected step twice and checks
	// that the cache answered the second.
	Answered func() uint64
}

// Factory returns a path on fresh counters that decides by clk.
type Factory func(t *testing.T, clk *storetest.Clock) Path

// callTimeout bounds one call; generous, for the race detector on a
// small machine.
const callTimeout = 10 * time.Second

// Run runs every case of Cases on paths from newPath, served by
// pkg/envoy over gRPC on a loopback port, and checks what Envoy would
// select from each response (Select), and that no response has Problems.
// A step that is to be rejected is sent twice: the second time, a deny
// cache in the path answers it.
func Run(t *testing.T, newPath Factory) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(Rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range Cases() {
		t.Run(tt.Name, func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(At * time.Second))
			p := newPath(t, clk)
			c := serve(t, limits.NewEngine(rs, p.Store, p.Engine))
			for i, st := range tt.Steps {
				req := request(st.Descs)
				check(t, c, p, i, req, st.Want, false)
				if st.Want.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
					check(t, c, p, i, req, st.Want, true)
				}
			}
		})
	}
}

// check sends req, step i of a case, and checks the response against
// want as p's mode requires; again marks the step's second sending.
func check(t *testing.T, c rlsv3.RateLimitServiceClient, p Path, i int, req *rlsv3.RateLimitRequest, want Want, again bool) {
	t.Helper()
	name := describe(req)
	if again {
		name += " (again)"
	}
	var answered uint64
	if p.Answered != nil {
		answered = p.Answered()
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if p.Mode == Error {
		if status.Code(err) != codes.Unavailable {
			t.Errorf("step %d %s: got %v, %v; want code Unavailable", i, name, resp, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("step %d %s: %v", i, name, err)
	}
	for _, pr := range Problems(resp) {
		t.Errorf("step %d %s: %s\nresponse: %v", i, name, pr, resp)
	}
	sel, found := Select(resp)
	switch p.Mode {
	case Open:
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || found {
			t.Errorf("step %d %s: failing open, got %v; want OK and no limit", i, name, resp)
		}
		return
	case Closed:
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !found || sel.Reset != int64(limits.ClosedReset/time.Second) {
			t.Errorf("step %d %s: failing closed, got %v; want OVER_LIMIT, leading to a limit with reset %v", i, name, resp, limits.ClosedReset)
		}
		return
	}
	got := Want{Code: resp.GetOverallCode(), Name: sel.Name, Remaining: sel.Remaining, Reset: sel.Reset}
	if !found {
		got.Name = ""
	}
	if got != want {
		t.Errorf("step %d %s: Envoy selects %+v, want %+v\nresponse: %v", i, name, got, want, resp)
	}
	if again && p.Answered != nil && p.Answered() == answered {
		t.Errorf("step %d %s: the deny cache did not answer the rejection it had seen", i, name)
	}
}

func request(ds []Desc) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: Domain}
	for _, d := range ds {
		rd := &rlscommon.RateLimitDescriptor{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: d.Key, Value: Values[d.Key]}}}
		if d.Hits != nil {
			rd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

// describe writes req's descriptors as [a] [b hits=0].
func describe(req *rlsv3.RateLimitRequest) string {
	var b strings.Builder
	for i, d := range req.GetDescriptors() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("[" + d.GetEntries()[0].GetKey())
		if h := d.GetHitsAddend(); h != nil {
			b.WriteString(" hits=" + strconv.FormatUint(h.GetValue(), 10))
		}
		b.WriteByte(']')
	}
	return b.String()
}

// serve serves e's decisions on a loopback port until the test ends and
// returns a client.
func serve(t *testing.T, e *limits.Engine) rlsv3.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	envoy.NewServer(e, zap.NewNop(), envoy.Options{}).Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}
