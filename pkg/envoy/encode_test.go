package envoy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// allModes has every header mode, and one that is none of them.
var allModes = []HeaderMode{HeadersNone, HeadersDraft03, HeadersIETF, HeaderMode(7)}

// encodeBoth encodes the response to d in mode through the message
// (Response, AddHeaders, proto.Marshal) and through the wire encoder and
// the codec; the bytes must be equal.
func encodeBoth(t *testing.T, d *limits.Decision, mode HeaderMode) {
	t.Helper()
	resp := response(d)
	addHeaders(mode, d, resp)
	want, err := proto.Marshal(resp)
	w := work{dec: *d}
	r := w.encode(mode)
	if err != nil {
		if r != nil {
			t.Fatalf("proto.Marshal fails (%v) but the wire encoder does not", err)
		}
		return
	}
	if r == nil {
		t.Fatal("the wire encoder fails but proto.Marshal does not")
	}
	if det, _ := (proto.MarshalOptions{Deterministic: true}).Marshal(resp); !bytes.Equal(det, want) {
		t.Fatalf("deterministic marshal differs: %x vs %x", det, want)
	}
	data, err := codec{}.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got := data.Materialize()
	_, small := data[0].(mem.SliceBuffer)
	data.Free()
	if !bytes.Equal(got, want) {
		var gotResp rlsv3.RateLimitResponse
		uerr := proto.Unmarshal(got, &gotResp)
		t.Fatalf("mode %v: wire encoding differs from proto.Marshal\n got  %x\n want %x\n got decodes to %v (err %v)\n want %v", mode, got, want, &gotResp, uerr, resp)
	}
	if wantSmall := mem.IsBelowBufferPoolingThreshold(len(want)); small != wantSmall {
		t.Errorf("%d bytes in a SliceBuffer: %v, want %v", len(want), small, wantSmall)
	}
	if _, err := (codec{}).Marshal(r); !errors.Is(err, errReplySent) {
		t.Errorf("second Marshal of a reply: error %v, want %v", err, errReplySent)
	}
}

// testLimits are limits with every shape a response shows: compiled ones
// with windows, and hand-made ones with units and counts out of range.
func testLimits(tb testing.TB) []*limits.Limit {
	tb.Helper()
	var ls []*limits.Limit
	for _, give := range []struct {
		alg   limits.Algorithm
		n     uint64
		unit  limits.Unit
		mult  uint64
		name  string
		shade bool
	}{
		{limits.FixedWindow, 100, limits.UnitSecond, 1, "", false},
		{limits.SlidingWindow, 50, limits.UnitMinute, 1, "tenant", false},
		{limits.TokenBucket, 1, limits.UnitSecond, 1, "töken", false},
		{limits.FixedWindow, 1000, limits.UnitDay, 1, "日本語の名前", false},
		{limits.FixedWindow, 4, limits.UnitSecond, 10, `log "v1" \ x`, false},
		{limits.FixedWindow, 2, limits.UnitYear, 3, "shadow", true},
		{limits.FixedWindow, 7, limits.UnitWeek, 1, strings.Repeat("long-name-", 30), false},
		{limits.SlidingWindow, 1 << 40, limits.UnitHour, 1, "big", false},
		{limits.FixedWindow, math.MaxUint32, limits.UnitMonth, 1, "max32", false},
		{limits.FixedWindow, 0, limits.UnitMinute, 1, "ban", false},
	} {
		l, err := limits.NewLimit(give.alg, give.n, give.unit, give.mult, 0)
		if err != nil {
			tb.Fatal(err)
		}
		l.Name, l.Shadow = give.name, give.shade
		ls = append(ls, l)
	}
	return append(ls,
		&limits.Limit{},
		&limits.Limit{Name: "ctl\x00\x7f", Unit: -1, Requests: math.MaxUint64},
		&limits.Limit{Unit: math.MinInt32, Requests: math.MaxUint32 + 1},
		&limits.Limit{Unit: math.MaxInt32, Name: "\u00e9\U0001F600"},
		&limits.Limit{Unit: 99, Requests: 128, Name: "x"},
	)
}

var (
	testRemaining = []uint64{0, 1, 127, 128, 999_999, math.MaxUint32 - 1, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	testResets    = []time.Duration{0, 1, time.Microsecond, 420 * time.Millisecond, time.Second - 1, time.Second,
		37*time.Second + 500*time.Millisecond, 24 * time.Hour, -1, -1500 * time.Millisecond, math.MaxInt64, math.MinInt64}
)

// randomDecision returns a decision with up to n statuses.
func randomDecision(r *rand.Rand, ls []*limits.Limit, n int) *limits.Decision {
	pick := func(n int) int { return r.IntN(n) }
	d := &limits.Decision{Code: limits.Code(pick(2)), Statuses: make([]limits.Status, pick(n+1))}
	if pick(8) == 0 {
		d.StoreErr = errors.New("store down")
		d.Fallback = []limits.FailureMode{limits.FailOpen, limits.FailClosed, limits.FailLocal}[pick(3)]
	}
	for i := range d.Statuses {
		st := &d.Statuses[i]
		st.Code = limits.Code(pick(2))
		switch pick(6) {
		case 0: // no limit
		case 1:
			st.Unlimited = true
			if pick(2) == 0 {
				st.Limit = &limits.Limit{Unlimited: true, Name: "free"}
			}
		default:
			st.Limit = ls[pick(len(ls))]
			st.Remaining = testRemaining[pick(len(testRemaining))]
			st.Reset = testResets[pick(len(testResets))]
			if pick(3) == 0 {
				st.Remaining = r.Uint64N(1 << pick(64))
				st.Reset = time.Duration(r.Int64N(1 << pick(63)))
			}
		}
	}
	return d
}

func TestEncodeMatchesProto(t *testing.T) {
	ls := testLimits(t)
	for _, mode := range allModes {
		encodeBoth(t, &limits.Decision{}, mode)
		encodeBoth(t, benchDecision(t), mode)
	}
	// One status of every limit, remaining and reset.
	for _, l := range ls {
		for _, rem := range testRemaining {
			for _, reset := range testResets {
				for _, c := range []limits.Code{limits.OK, limits.OverLimit} {
					d := &limits.Decision{Code: c, Statuses: []limits.Status{{Code: c, Limit: l, Remaining: rem, Reset: reset}}}
					for _, mode := range allModes {
						encodeBoth(t, d, mode)
					}
				}
			}
		}
	}
	// proto.Marshal refuses invalid UTF-8; so must the encoder.
	bad := &limits.Decision{Statuses: []limits.Status{{Limit: &limits.Limit{Name: "\xff"}}}}
	encodeBoth(t, bad, HeadersNone)
	if (&work{dec: *bad}).encode(HeadersNone) != nil {
		t.Error("encoded a name that is not UTF-8")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		n := 5
		if i%10 == 0 {
			n = 64 // past gRPC's 1 KiB pooling threshold
		}
		d := randomDecision(r, ls, n)
		encodeBoth(t, d, allModes[i%len(allModes)])
	}
}

// decisionFrom derives a decision and a mode from fuzz input.
func decisionFrom(ls []*limits.Limit, data []byte) (*limits.Decision, HeaderMode) {
	next := func() uint64 {
		var v uint64
		for i := 0; i < 8 && len(data) > 0; i++ {
			v, data = v<<8|uint64(data[0]), data[1:]
		}
		return v
	}
	h := next()
	mode := HeaderMode(h % 4)
	d := &limits.Decision{Code: limits.Code(h >> 8 & 1)}
	if h>>9&1 == 1 {
		d.StoreErr, d.Fallback = errors.New("down"), limits.FailureMode(h>>10%5)
	}
	for len(data) > 0 {
		k := next()
		st := limits.Status{Code: limits.Code(k & 1), Unlimited: k>>1&3 == 1}
		if k>>1&3 >= 2 {
			l := *ls[k>>3%uint64(len(ls))]
			if k>>8&1 == 1 {
				l.Unit = limits.Unit(int32(k >> 32))
				l.Requests = next()
			}
			if k>>9&1 == 1 {
				n := min(int(k>>10&0xff), len(data))
				l.Name, data = string(data[:n]), data[n:]
			}
			st.Limit = &l
			st.Remaining = next()
			st.Reset = time.Duration(next())
		}
		d.Statuses = append(d.Statuses, st)
	}
	return d, mode
}

// FuzzEncode: the wire encoder agrees with proto.Marshal on every decision.
func FuzzEncode(f *testing.F) {
	ls := testLimits(f)
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x00\x00\x01\x04"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x00\x00\x03\x04abcdefghijklmnop\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, mode := decisionFrom(ls, data)
		encodeBoth(t, d, mode)
	})
}

// TestReplyOwnership: a reply's bytes stay intact until gRPC frees them,
// while other replies are made and freed, and the pooled ones go back
// only through Free.
func TestReplyOwnership(t *testing.T) {
	ls := testLimits(t)
	r := rand.New(rand.NewPCG(3, 4))
	type held struct {
		data mem.BufferSlice
		want []byte
	}
	var hold []held
	pooled := 0
	for i := range 400 {
		d := randomDecision(r, ls, 64)
		resp := response(d)
		addHeaders(HeadersIETF, d, resp)
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		w := work{dec: *d}
		data, err := codec{}.Marshal(w.encode(HeadersIETF))
		if err != nil {
			t.Fatal(err)
		}
		if _, small := data[0].(mem.SliceBuffer); !small {
			pooled++
		}
		hold = append(hold, held{data, want})
		if i%3 == 0 { // free an older one, so that the pool has buffers to hand out
			k := r.IntN(len(hold))
			h := hold[k]
			if got := h.data.Materialize(); !bytes.Equal(got, h.want) {
				t.Fatalf("reply changed while held:\n got  %x\n want %x", got, h.want)
			}
			h.data.Free()
			hold = append(hold[:k], hold[k+1:]...)
		}
	}
	for _, h := range hold {
		if got := h.data.Materialize(); !bytes.Equal(got, h.want) {
			t.Fatalf("reply changed while held:\n got  %x\n want %x", got, h.want)
		}
		h.data.Free()
	}
	if pooled < 50 {
		t.Errorf("only %d of 400 replies came from the pool; the test needs more", pooled)
	}
}

const encodeRules = `
domain: enc
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3, name: 'n "q"'}
  - key: t
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 2, name: töken}
  - key: free
    rate_limit: {unlimited: true}
`

// TestEncodeOverGRPC sends the same requests to a server over gRPC (wire
// encoder) and to an identical one through ShouldRateLimit (message), and
// compares the responses, small and past the pooling threshold. With an
// interceptor, the gRPC path sends a message instead.
func TestEncodeOverGRPC(t *testing.T) {
	intercept := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := req.(*limits.Request); !ok {
			return nil, fmt.Errorf("interceptor got a %T", req)
		}
		resp, err := h(ctx, req)
		if _, ok := resp.(*rlsv3.RateLimitResponse); !ok && err == nil {
			return nil, fmt.Errorf("interceptor got a %T", resp)
		}
		return resp, err
	})
	for _, tt := range []struct {
		mode HeaderMode
		opts []grpc.ServerOption
	}{
		{mode: HeadersNone},
		{mode: HeadersDraft03},
		{mode: HeadersIETF},
		{mode: HeadersIETF, opts: []grpc.ServerOption{intercept}},
	} {
		name := tt.mode.String()
		if tt.opts != nil {
			name += "/interceptor"
		}
		mode := tt.mode
		t.Run(name, func(t *testing.T) {
			newServer := func() *Server {
				rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(encodeRules)}}, config.Options{})
				if err != nil {
					t.Fatal(err)
				}
				clk := storetest.NewClock(storetest.Epoch.Add(1234567 * time.Microsecond))
				e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{})
				return NewServer(e, zap.NewNop(), Options{Headers: mode})
			}
			viaMessage := newServer()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer(append(ServerOptions(), tt.opts...)...)
			newServer().Register(gs)
			go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
			defer gs.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlsv3.NewRateLimitServiceClient(conn)
			r := rand.New(rand.NewPCG(5, 6))
			for i := range 60 {
				req := &rlsv3.RateLimitRequest{Domain: "enc"}
				for range r.IntN(64) + 1 {
					key := []string{"k", "t", "free", "none"}[r.IntN(4)]
					req.Descriptors = append(req.Descriptors, &rlscommon.RateLimitDescriptor{
						Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: key, Value: fmt.Sprint(r.IntN(3))}},
					})
				}
				want, err := viaMessage.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := client.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("request %d: over gRPC\n%v\nwant\n%v", i, got, want)
				}
			}
		})
	}
}

// benchDecision is what the tiered load sends back: three descriptors
// (global, tenant, tenant+user), all under their limits.
func benchDecision(tb testing.TB) *limits.Decision {
	tb.Helper()
	lim := func(alg limits.Algorithm, n uint64, u limits.Unit, name string) *limits.Limit {
		l, err := limits.NewLimit(alg, n, u, 1, 0)
		if err != nil {
			tb.Fatal(err)
		}
		l.Name = name
		return l
	}
	global := lim(limits.FixedWindow, 1_000_000_000, limits.UnitSecond, "")
	tenant := lim(limits.SlidingWindow, 1_000_000_000, limits.UnitMinute, "tenant")
	user := lim(limits.TokenBucket, 1_000_000, limits.UnitSecond, "")
	return &limits.Decision{Statuses: []limits.Status{
		{Limit: global, Remaining: 999_987_654, Reset: 420 * time.Millisecond},
		{Limit: tenant, Remaining: 999_999_001, Reset: 37*time.Second + 500*time.Millisecond},
		{Limit: user, Remaining: 999_999, Reset: time.Microsecond},
	}}
}

// BenchmarkResponseEncode measures a response from decision to the bytes
// gRPC sends: message is Response, AddHeaders and the standard codec;
// wire is the wire encoder and the codec.
func BenchmarkResponseEncode(b *testing.B) {
	d := benchDecision(b)
	std := encoding.GetCodecV2(grpcproto.Name)
	for _, mode := range []HeaderMode{HeadersNone, HeadersIETF} {
		b.Run("message/"+mode.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := response(d)
				addHeaders(mode, d, resp)
				data, err := std.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
		b.Run("wire/"+mode.String(), func(b *testing.B) {
			w := work{dec: *d}
			c := codec{std: std}
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(w.encode(mode))
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}
