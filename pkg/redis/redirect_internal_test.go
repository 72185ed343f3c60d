package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestCloseWaitsForRedirects checks that a call of a batch that a
// Cluster node refused, and that goes again on a goroutine of its own so
// that the round trip ends at once, does not outlive Close: Close ends
// it and waits for it. The redirection is held in flight until its
// context ends, so that it is surely under way at Close.
func TestCloseWaitsForRedirects(t *testing.T) {
	tests := []struct {
		name string
		// give are the keys of the batch's calls: "moved" is of a slot
		// that the pipe's node does not serve, "local" of one it does.
		give []string
	}{
		// MOVED for the call alone: redirected on its own goroutine.
		{name: "moved", give: []string{"moved"}},
		// One apply.lua call of both, refused whole: each goes again
		// alone on its own goroutine, and "moved" is redirected there.
		{name: "refused run", give: []string{"moved", "local"}},
	}
	cl := redistest.StartCluster(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testCloseWaitsForRedirects(t, cl, tt.give)
		})
	}
}

func testCloseWaitsForRedirects(t *testing.T, cl *redistest.Cluster, give []string) {
	ignore := goleak.IgnoreCurrent() // the cluster's processes
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // after the check below: a leaked redirection ends here

	s, err := New(ctx, Options{ClusterAddrs: cl.Addrs, KeyPrefix: newTestPrefix(t), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})
	l, err := limits.NewLimit(limits.FixedWindow, 10, limits.UnitHour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	wrong := otherMaster(ctx, t, s, s.prefix+"moved")
	checks := map[string]limits.Check{
		"moved": {Key: "moved", Limit: l, Hits: 1},
		"local": {Key: servedBy(ctx, t, s, wrong), Limit: l, Hits: 1},
	}

	p := newPipe(wrong, 1, s.warmer)
	p.cross = true
	redirecting := make(chan struct{})
	p.redirect = func(ctx context.Context, keys []string, args []any, refusal error) ([]int64, error) {
		close(redirecting) // once: only "moved" is refused alone
		<-ctx.Done()
		return s.redirectApply(ctx, keys, args, refusal)
	}
	var q []*call
	for _, k := range give {
		c := getCall(ctx)
		s.setArgs(c, []limits.Check{checks[k]}, nil, 0, "", modeApply)
		c.slot = slot(s.prefix, checks[k].Key)
		q = append(q, c)
	}
	p.send(q[0], q) // as the leader of a batch

	<-redirecting
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	goleak.VerifyNone(t, ignore)
}

// newTestPrefix returns a key prefix of t's own.
func newTestPrefix(t *testing.T) string {
	return strings.NewReplacer("{", "(", "}", ")", " ", "_", "/", ":").Replace(t.Name()) + ":"
}

// servedBy returns a key, under s's prefix, of a slot that node serves.
func servedBy(ctx context.Context, t *testing.T, s *Store, node *goredis.Client) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint("local", i)
		n, err := s.cc.MasterForKey(ctx, s.prefix+k)
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr == node.Options().Addr {
			return k
		}
	}
	t.Fatalf("no key of %s in 1000", node.Options().Addr)
	return ""
}

// otherMaster returns the client of a master of s's Cluster that does not
// serve key.
func otherMaster(ctx context.Context, t *testing.T, s *Store, key string) *goredis.Client {
	t.Helper()
	owner, err := s.cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make(chan *goredis.Client, 3) // ForEachMaster calls in parallel
	err = s.cc.ForEachMaster(ctx, func(_ context.Context, n *goredis.Client) error {
		if n.Options().Addr != owner.Options().Addr {
			select {
			case nodes <- n:
			default:
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-nodes:
		return n
	default:
		t.Fatalf("no master but %s's", key)
		return nil
	}
}
