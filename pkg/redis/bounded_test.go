package redis_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// hostile are replies that announce far more than they send: what
// go-redis would allocate on their first bytes, well past replyMemory,
// were they not refused.
var hostile = []struct {
	name string
	give string
}{
	// A []int64 or []any of 20,000,000: 160 or 320 MB.
	{"array", "*20000000\r\n"},
	// A string of 200,000,000 bytes, as an element: go-redis reads an
	// integer or a string element from a bulk string too.
	{"bulk", "*1\r\n$200000000\r\n"},
	// 200,000 levels, each an integer and the next level: go-redis
	// recurses once a level where it reads any reply (a map's values,
	// Do, Slice), and allocates at each. Where it reads only integers or
	// strings, it fails at the second level unbounded.
	{"nesting", strings.Repeat("*2\r\n:1\r\n", 200_000)},
}

// replyMemory bounds what refusing a hostile reply may cost: heap
// allocated and stack grown, each.
const replyMemory = 16 << 20

// memDelta runs f and returns the bytes it allocated on the heap and the
// growth of the stacks in use, from runtime.ReadMemStats.
func memDelta(f func()) (alloc, stack uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	if after.StackInuse > before.StackInuse {
		stack = after.StackInuse - before.StackInuse
	}
	return after.TotalAlloc - before.TotalAlloc, stack
}

// wantRefused fails t unless err is a reply refused at the bounds,
// reported as Redis unavailable, and the refusal cost at most
// replyMemory.
func wantRefused(t *testing.T, err error, alloc, stack uint64) {
	t.Helper()
	var be *redis.ReplyBoundError
	if !errors.As(err, &be) {
		t.Errorf("err = %v, want a reply refused at its bounds", err)
	}
	if !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("err = %v, want it to wrap ErrStoreUnavailable", err)
	}
	if alloc > replyMemory || stack > replyMemory {
		t.Errorf("refusing the reply allocated %d bytes and grew stacks by %d, want at most %d each", alloc, stack, replyMemory)
	}
}

// TestHostileReplyPipe sends a request through the pipe of a standalone
// store whose Redis answers EVALSHA with a hostile reply.
func TestHostileReplyPipe(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			fake := redistest.NewFake(t, func(args []string) ([]byte, bool) {
				if strings.EqualFold(args[0], "evalsha") {
					return []byte(tt.give), false
				}
				return nil, false
			})
			s := newStore(t, redis.Options{URL: urlOf(fake.Addr)})
			l := mustLimit(t, limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
			var err error
			alloc, stack := memDelta(func() {
				err = s.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{check("k", l, 1)}})
			})
			wantRefused(t, err, alloc, stack)
		})
	}
}

// subscribed answers a SUBSCRIBE as Redis does in RESP2.
func subscribed(args []string) []byte {
	var b []byte
	for i, ch := range args[1:] {
		b = append(b, "*3\r\n"...)
		b = append(b, redistest.Bulk("subscribe")...)
		b = append(b, redistest.Bulk(ch)...)
		b = append(b, ":"+strconv.Itoa(i+1)+"\r\n"...)
	}
	return b
}

// fakeSentinel starts a sentinel that names master at addr, or answers
// the question with a hostile reply, if addr is "".
func fakeSentinel(t *testing.T, addr, hostile string) *redistest.Fake {
	return redistest.NewFake(t, func(args []string) ([]byte, bool) {
		switch strings.ToLower(args[0]) {
		case "subscribe":
			return subscribed(args), false
		case "sentinel":
			if addr == "" {
				return []byte(hostile), false
			}
			host, port, _ := strings.Cut(addr, ":")
			return append(append([]byte("*2\r\n"), redistest.Bulk(host)...), redistest.Bulk(port)...), false
		}
		return nil, false
	})
}

// newStoreErr is New's error for o, with the test timeout, and the
// memory it took to fail (see memDelta).
func newStoreErr(t *testing.T, o redis.Options) (err error, alloc, stack uint64) {
	t.Helper()
	o.KeyPrefix, o.Timeout = newPrefix(t), testTimeout
	alloc, stack = memDelta(func() {
		var s *redis.Store
		s, err = redis.New(context.Background(), o)
		if err == nil {
			_ = s.Close()
		}
	})
	return err, alloc, stack
}

// TestHostileReplySentinel answers the store's question for the master
// with a hostile reply.
func TestHostileReplySentinel(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			sentinel := fakeSentinel(t, "", tt.give)
			err, alloc, stack := newStoreErr(t, redis.Options{SentinelMaster: "m", SentinelAddrs: []string{sentinel.Addr}})
			wantRefused(t, err, alloc, stack)
		})
	}
}

// TestHostileReplySentinelMaster has the master that the sentinel names
// answer the store's first command (HELLO, which asks its role) with a
// hostile reply.
func TestHostileReplySentinelMaster(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			master := redistest.NewFake(t, func([]string) ([]byte, bool) { return []byte(tt.give), false })
			sentinel := fakeSentinel(t, master.Addr, "")
			err, alloc, stack := newStoreErr(t, redis.Options{SentinelMaster: "m", SentinelAddrs: []string{sentinel.Addr}})
			wantRefused(t, err, alloc, stack)
		})
	}
}

// TestHostileReplyClusterSlots answers a Cluster store's CLUSTER SLOTS
// with a hostile reply.
func TestHostileReplyClusterSlots(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			node := redistest.NewFake(t, func(args []string) ([]byte, bool) {
				if strings.EqualFold(args[0], "cluster") {
					return []byte(tt.give), false
				}
				return nil, false
			})
			err, alloc, stack := newStoreErr(t, redis.Options{ClusterAddrs: []string{node.Addr}})
			wantRefused(t, err, alloc, stack)
		})
	}
}

// TestHostileReplyClusterNode has a one-node Cluster answer EVALSHA,
// sent through its master's pipe, with a hostile reply.
func TestHostileReplyClusterNode(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			var addr atomic.Pointer[string]
			node := redistest.NewFake(t, func(args []string) ([]byte, bool) {
				switch strings.ToLower(args[0]) {
				case "cluster":
					host, port, _ := strings.Cut(*addr.Load(), ":")
					b := []byte("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n")
					b = append(b, redistest.Bulk(host)...)
					b = append(b, ":"+port+"\r\n"...)
					return append(b, redistest.Bulk(strings.Repeat("a", 40))...), false
				case "command":
					return []byte("*0\r\n"), false
				case "evalsha":
					return []byte(tt.give), false
				}
				return nil, false
			})
			addr.Store(&node.Addr)
			s := newStore(t, redis.Options{ClusterAddrs: []string{node.Addr}})
			l := mustLimit(t, limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
			var err error
			alloc, stack := memDelta(func() {
				err = s.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{check("k", l, 1)}})
			})
			wantRefused(t, err, alloc, stack)
		})
	}
}

// resubscribed returns an Answer that answers SUBSCRIBE with reply and
// hangs up, then closes the channel it returns at the second SUBSCRIBE:
// the client has read the first reply, failed and connected again. It
// answers the other commands as other does (nil: DefaultAnswer).
func resubscribed(reply string, other redistest.Answer) (redistest.Answer, <-chan struct{}) {
	again := make(chan struct{})
	var n atomic.Int32
	return func(args []string) ([]byte, bool) {
		if !strings.EqualFold(args[0], "subscribe") {
			if other == nil {
				return nil, false
			}
			return other(args)
		}
		if n.Add(1) == 2 {
			close(again)
		}
		return []byte(reply), true
	}, again
}

// TestHostileReplyPubSub answers the store's subscriptions, to a
// sentinel's events and to other sidecars' refunds, with a hostile reply
// and a hangup, and waits for the client to subscribe again: it read the
// reply, which cost no more than replyMemory. Nothing reports the
// refusal but the connection's end.
func TestHostileReplyPubSub(t *testing.T) {
	for _, tt := range hostile {
		t.Run("sentinel/"+tt.name, func(t *testing.T) {
			master := redistest.NewFake(t, nil)
			host, port, _ := strings.Cut(master.Addr, ":")
			answer, again := resubscribed(tt.give, func(args []string) ([]byte, bool) {
				if strings.EqualFold(args[0], "sentinel") {
					return append(append([]byte("*2\r\n"), redistest.Bulk(host)...), redistest.Bulk(port)...), false
				}
				return nil, false
			})
			sentinel := redistest.NewFake(t, answer)
			alloc, stack := memDelta(func() {
				newStore(t, redis.Options{SentinelMaster: "m", SentinelAddrs: []string{sentinel.Addr}})
				<-again
			})
			if alloc > replyMemory || stack > replyMemory {
				t.Errorf("the sentinel's reply allocated %d bytes and grew stacks by %d, want at most %d each", alloc, stack, replyMemory)
			}
		})
		t.Run("refunds/"+tt.name, func(t *testing.T) {
			answer, again := resubscribed(tt.give, nil)
			fake := redistest.NewFake(t, answer)
			s := newStore(t, redis.Options{URL: urlOf(fake.Addr)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			alloc, stack := memDelta(func() {
				go func() {
					defer close(done)
					s.Refunds(ctx, func(string) {}, func() {})
				}()
				<-again
			})
			cancel()
			<-done
			if alloc > replyMemory || stack > replyMemory {
				t.Errorf("the subscription's reply allocated %d bytes and grew stacks by %d, want at most %d each", alloc, stack, replyMemory)
			}
		})
	}
}
