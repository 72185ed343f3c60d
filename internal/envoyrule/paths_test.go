package envoyrule_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envoyrule"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var prefixSeq atomic.Int64

// newRedis returns a store of o on fresh keys, deciding by clk (nil:
// Redis's clock), closed at cleanup.
func newRedis(t *testing.T, o redis.Options, clk *storetest.Clock) *redis.Store {
	t.Helper()
	o.KeyPrefix = fmt.Sprintf("p%d:", prefixSeq.Add(1))
	o.Timeout = 5 * time.Second
	if clk != nil {
		o.Now = clk.Now
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.New(ctx, o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestPaths runs the table on every way a request gets decided.
func TestPaths(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
			return envoyrule.Path{Store: memory.New(memory.Options{Now: clk.Now})}
		})
	})

	srv := redistest.StartServer(t)
	url := "redis://" + srv.Addr
	t.Run("redis", func(t *testing.T) {
		envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
			return envoyrule.Path{Store: newRedis(t, redis.Options{URL: url}, clk)}
		})
	})
	t.Run("redis_deny_cache", func(t *testing.T) {
		envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
			c := store.NewDenyCache(newRedis(t, redis.Options{URL: url}, clk), store.DenyCacheOptions{Now: clk.Now})
			return envoyrule.Path{Store: c, Answered: c.Answered}
		})
	})
	// The sidecar's chain: leases in front of the deny cache in front of
	// Redis.
	t.Run("redis_leases", func(t *testing.T) {
		envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
			rs := newRedis(t, redis.Options{URL: url}, clk)
			c := store.NewDenyCache(rs, store.DenyCacheOptions{Now: clk.Now})
			return envoyrule.Path{Store: store.NewLeases(c, store.LeasesOptions{Now: clk.Now, Return: rs}), Answered: c.Answered}
		})
	})

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		requireApart(t, cl.Client(t))
		envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
			return envoyrule.Path{Store: newRedis(t, redis.Options{ClusterAddrs: cl.Addrs}, clk)}
		})
	})

	// The failure modes, with Redis stopped. Each request dials once and
	// fails; a pool larger than the requests keeps go-redis from starting
	// its background redialler, which sleeps a second between tries and
	// would outlive the test.
	down := redistest.StartServer(t)
	stopped := newRedis(t, redis.Options{URL: "redis://" + down.Addr, PoolSize: 10_000}, nil)
	down.Kill()
	for _, tt := range []struct {
		mode limits.FailureMode
		want envoyrule.Mode
	}{
		{limits.FailOpen, envoyrule.Open},
		{limits.FailClosed, envoyrule.Closed},
		{limits.FailLocal, envoyrule.Decided},
		{limits.FailError, envoyrule.Error},
	} {
		t.Run("redis_down_"+tt.mode.String(), func(t *testing.T) {
			envoyrule.Run(t, func(t *testing.T, clk *storetest.Clock) envoyrule.Path {
				eo := limits.EngineOptions{FailureMode: tt.mode, Local: memory.New(memory.Options{Now: clk.Now})}
				return envoyrule.Path{Store: stopped, Engine: eo, Mode: tt.want}
			})
		})
	}
}

// requireApart fails the test unless the keys of every two descriptors
// that a step of the table sends together lie on different masters of
// the cluster, so that the request reserves in several slots.
func requireApart(t *testing.T, cc *goredis.ClusterClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(envoyrule.Rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	master := func(key string) string {
		entries := []limits.Entry{{Key: key, Value: envoyrule.Values[key]}}
		k, tag := limits.AppendKey(nil, envoyrule.Domain, entries, rs.Match(envoyrule.Domain, entries).Limits[0])
		slot, err := cc.ClusterKeySlot(ctx, string(k[:tag])).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				return r.Nodes[0].Addr
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return ""
	}
	for _, tt := range envoyrule.Cases() {
		for _, st := range tt.Steps {
			seen := map[string]string{}
			for _, d := range st.Descs {
				if d.Key == "free" {
					continue // unlimited: no key
				}
				m := master(d.Key)
				if other, ok := seen[m]; ok && other != d.Key {
					t.Fatalf("case %s: descriptors %s and %s are both on master %s: choose other envoyrule.Values", tt.Name, other, d.Key, m)
				}
				seen[m] = d.Key
			}
		}
	}
}
