package redisauth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// testTimeout bounds each Redis call in these tests: generous, so that
// the race detector on a busy machine cannot trip it.
const testTimeout = 5 * time.Second

// topology is a Redis deployment to rotate a password on: the store's
// options, without credentials, and a client of every data node.
type topology struct {
	opts  redis.Options
	nodes []*goredis.Client
}

func standalone(t *testing.T) topology {
	s := redistest.StartServer(t)
	return topology{opts: redis.Options{URL: "redis://" + s.Addr}, nodes: []*goredis.Client{s.Client(t)}}
}

func sentinel(t *testing.T) topology {
	s := redistest.StartSentinel(t)
	return topology{
		opts:  redis.Options{SentinelMaster: s.MasterName, SentinelAddrs: s.SentinelAddrs},
		nodes: []*goredis.Client{s.Master.Client(t), s.Replica.Client(t)},
	}
}

func cluster(t *testing.T) topology {
	c := redistest.StartCluster(t)
	var nodes []*goredis.Client
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	return topology{opts: redis.Options{ClusterAddrs: c.Addrs}, nodes: nodes}
}

// acl runs ACL SETUSER app rules... on every node.
func (tp topology) acl(t *testing.T, rules ...string) {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", "app"}, anys(rules)...)
	for _, c := range tp.nodes {
		if err := c.Do(context.Background(), args...).Err(); err != nil {
			t.Fatalf("ACL SETUSER app %v on %s: %v", rules, c.Options().Addr, err)
		}
	}
}

func anys(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

// TestRotatedPasswordUnderLoad rotates the password of the store's ACL
// user three times while requests run, as a secret manager does: the new
// password is added to the user, the secret volume is swapped to it, and
// the old password is removed. Connections live a millisecond, so the
// store opens new ones all along, with whichever password the file holds
// then. Every decision must succeed, and count once: the limit is the
// number of decisions, each admitted decision leaves a different
// remaining count, and one more is over.
func TestRotatedPasswordUnderLoad(t *testing.T) {
	tests := []struct {
		name  string
		start func(*testing.T) topology
	}{
		{"standalone", standalone},
		{"sentinel", sentinel},
		{"cluster", cluster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := tt.start(t)
			tp.acl(t, "on", ">pw0", "~*", "&*", "+@all")
			vol := newSecretDir(t, map[string]string{"username": "app", "password": "pw0"})
			log := zaptest.NewLogger(t)
			user, err := redisauth.OpenSecret(vol.path("username"), log)
			if err != nil {
				t.Fatal(err)
			}
			pass, err := redisauth.OpenSecret(vol.path("password"), log)
			if err != nil {
				t.Fatal(err)
			}
			o := tp.opts
			o.Credentials = redisauth.NewFile("", user, "", pass)
			o.ConnMaxLifetime = time.Millisecond
			o.PoolSize = 4
			o.Timeout = testTimeout
			o.KeyPrefix = fmt.Sprintf("rotate-%s:", tt.name)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := redis.New(ctx, o)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer st.Close()

			const (
				decisions = 2000
				workers   = 4
				rotations = 3
			)
			l, err := limits.NewLimit(limits.FixedWindow, decisions, limits.UnitHour, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			check := func() (*limits.Batch, error) {
				b := &limits.Batch{Checks: []limits.Check{{Key: "{k}rotated", Limit: l, Hits: 1}}}
				return b, st.Apply(ctx, b)
			}

			// reached[i] closes once (i+1)/(rotations+1) of the decisions
			// are made: the rotations wait on it.
			var reached [rotations]chan struct{}
			for i := range reached {
				reached[i] = make(chan struct{})
			}
			var (
				made      atomic.Int64
				mu        sync.Mutex
				remaining []uint64
				failed    []error
				wg        sync.WaitGroup
			)
			for range workers {
				wg.Go(func() {
					for range decisions / workers {
						b, err := check()
						mu.Lock()
						if err != nil {
							failed = append(failed, err)
						} else if !b.Admitted {
							failed = append(failed, errors.New("not admitted"))
						} else {
							remaining = append(remaining, b.Outcomes[0].Remaining)
						}
						mu.Unlock()
						n := made.Add(1)
						for i := range reached {
							if n == int64((i+1)*decisions/(rotations+1)) {
								close(reached[i])
							}
						}
					}
				})
			}
			for i := range rotations {
				<-reached[i]
				old, next := fmt.Sprintf("pw%d", i), fmt.Sprintf("pw%d", i+1)
				tp.acl(t, ">"+next)
				vol.update(t, map[string]string{"username": "app", "password": next})
				redistest.AwaitAuthenticated(t, tp.nodes...)
				tp.acl(t, "<"+old)
			}
			wg.Wait()

			if len(failed) > 0 {
				t.Fatalf("%d of %d decisions failed; first: %v", len(failed), decisions, failed[0])
			}
			slices.Sort(remaining)
			for i, r := range remaining {
				if r != uint64(i) {
					t.Fatalf("remaining counts are not 0..%d once each: at %d got %d", decisions-1, i, r)
				}
			}
			if b, err := check(); err != nil || b.Admitted {
				t.Errorf("decision %d of a limit of %d: admitted %v, err %v; want over", decisions+1, decisions, b.Admitted, err)
			}
			// The old passwords are gone: a connection opened now can only
			// have the last one.
			if got := pass.Changes(); got != rotations {
				t.Errorf("password changes seen: %d, want %d", got, rotations)
			}
		})
	}
}
