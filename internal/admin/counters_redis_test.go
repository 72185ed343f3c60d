package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// redisTimeout bounds each Redis call: long, so that a busy machine fails
// a test loudly rather than by a timeout the test did not mean.
const redisTimeout = 5 * time.Second

// newRedisCounterSite serves the counter endpoints over Redis as the
// sidecar stacks it: the engine decides through leases and a deny cache
// in front of the store, and the endpoints read the store itself, the
// deny cache and the leases. o's Store, StoreName, Deny and Leases are
// filled in.
func newRedisCounterSite(t *testing.T, ro redis.Options, o admin.CountersOptions) *counterSite {
	t.Helper()
	ro.Timeout = redisTimeout
	st, err := redis.New(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	deny := store.NewDenyCache(st, store.DenyCacheOptions{})
	leases := store.NewLeases(deny, store.LeasesOptions{Return: st})
	o.Store, o.StoreName, o.Deny, o.Leases = st, "redis", deny, leases
	return serveCounters(t, limits.NewEngine(parse(t, counterRules(t)), leases, limits.EngineOptions{}), o)
}

// TestCounterResetRedis reads and resets a counter on Redis that the deny
// cache rejects, and one a lease holds hits of: both are read with what
// the cache and the lease hold, then cleared with the counter; the next
// request is admitted, and the reset is logged once, with the values
// hashed and the caller's address.
func TestCounterResetRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newRedisCounterSite(t, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "reset:"},
		admin.CountersOptions{AllowReset: true, Values: rejectlog.Hashed})
	for range 3 {
		s.hit(t, 1, "user", "alice")
	}
	// The first rejection comes from Redis, the second from the cache.
	s.hit(t, 1, "user", "alice")
	s.hit(t, 1, "user", "alice")
	s.hit(t, 1, "global", "x")
	s.hit(t, 1, "global", "x") // from the lease

	v := s.counters(t, "user=alice", "global=x")
	user := v.Descriptors[0].Counters[0]
	if v.Store != "redis" || !strings.HasPrefix(user.Key, "reset:{") || *user.State.Hits != 3 || !*user.Over || user.DenyCache == nil || user.DenyCache.Probe != 1 {
		t.Fatalf("user=alice before the reset: %+v, state %+v", user, user.State)
	}
	global := v.Descriptors[1].Counters[0]
	// The first request took 1 and a lease of 10, the second 1 of the
	// lease.
	if *global.State.Hits != 11 || global.Lease == nil || global.Lease.Held != 9 {
		t.Fatalf("global=x before the reset: %+v, state %+v, lease %+v", global, global.State, global.Lease)
	}

	code, body := s.call(t, http.MethodPost, "/debug/counters/reset", "user=alice", "global=x")
	if code != http.StatusOK {
		t.Fatalf("POST /debug/counters/reset = %d %s", code, body)
	}
	var rv admin.ResetView
	if err := json.Unmarshal([]byte(body), &rv); err != nil {
		t.Fatal(err)
	}
	ru, rg := rv.Descriptors[0].Counters[0], rv.Descriptors[1].Counters[0]
	if !ru.Deleted || !ru.DenyCacheDropped || !rg.Deleted || rg.LeaseDropped == nil || *rg.LeaseDropped != 9 {
		t.Errorf("reset: %s", body)
	}

	v = s.counters(t, "user=alice", "global=x")
	user, global = v.Descriptors[0].Counters[0], v.Descriptors[1].Counters[0]
	if !user.State.Fresh || user.DenyCache != nil || !global.State.Fresh || global.Lease != nil {
		t.Errorf("after the reset: user %+v (state %+v), global %+v (state %+v)", user, user.State, global, global.State)
	}
	if got := s.hit(t, 1, "user", "alice"); got != limits.OK {
		t.Errorf("after the reset: %v, want OK", got)
	}

	if s.resets != 2 {
		t.Errorf("ResetDone counted %d, want 2", s.resets)
	}
	lines := s.logs.FilterMessage("counters reset through the admin endpoint").All()
	if len(lines) != 1 || lines[0].Level != zap.WarnLevel {
		t.Fatalf("log: %+v, want one Warn line", s.logs.All())
	}
	f := lines[0].ContextMap()
	if f["domain"] != "edge" || f["counters"] != int64(2) || !strings.HasPrefix(f["remote_addr"].(string), "127.0.0.1:") {
		t.Errorf("reset log line: %v", f)
	}
	if strings.Contains(strings.Join(anyStrings(f["descriptors"]), " "), "alice") {
		t.Errorf("the log shows a value, not its hash: %v", f["descriptors"])
	}
}

// TestCountersCluster reads a counter of each algorithm on a Redis
// Cluster, and resets them.
func TestCountersCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	s := newRedisCounterSite(t, redis.Options{ClusterAddrs: c.Addrs}, admin.CountersOptions{AllowReset: true})
	s.hit(t, 4, "tenant", "acme")
	s.hit(t, 2, "path", "/x")
	v := s.counters(t, "tenant=acme", "path=/x")
	tenant, path := v.Descriptors[0].Counters, v.Descriptors[1].Counters[0]
	if tenant[0].State.Hits == nil || tenant[1].State.Tokens == nil || tenant[2].State.Backlog == nil || path.State.Hits == nil {
		t.Fatalf("counters without state: %+v %+v %+v %+v", tenant[0].State, tenant[1].State, tenant[2].State, path.State)
	}
	if *tenant[0].State.Hits != 4 || *tenant[1].State.Tokens != 6 || *tenant[2].State.Backlog != 4 || *path.State.Hits != 2 {
		t.Fatalf("counters: %+v %+v %+v %+v", tenant[0].State, tenant[1].State, tenant[2].State, path.State)
	}
	if code, body := s.call(t, http.MethodPost, "/debug/counters/reset", "tenant=acme", "path=/x"); code != http.StatusOK {
		t.Fatalf("reset = %d %s", code, body)
	}
	v = s.counters(t, "tenant=acme", "path=/x")
	for _, d := range v.Descriptors {
		for _, c := range d.Counters {
			if !c.State.Fresh {
				t.Errorf("%s after the reset: %+v", c.Limit, c.State)
			}
		}
	}
}

// TestCountersStoreDown: with Redis down, a counter shows the error, and
// a reset fails with 503 and keeps what the deny cache knows.
func TestCountersStoreDown(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newRedisCounterSite(t, redis.Options{URL: "redis://" + srv.Addr}, admin.CountersOptions{AllowReset: true})
	for range 5 {
		s.hit(t, 1, "user", "alice")
	}
	srv.Kill()
	c := s.counters(t, "user=alice").Descriptors[0].Counters[0]
	if c.Error == "" || c.State != nil || c.DenyCache == nil {
		t.Errorf("with Redis down: %+v; want an error, no state, and the deny cache entry", c)
	}
	code, body := s.call(t, http.MethodPost, "/debug/counters/reset", "user=alice")
	var rv admin.ResetView
	if err := json.Unmarshal([]byte(body), &rv); err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if r := rv.Descriptors[0].Counters[0]; code != http.StatusServiceUnavailable || r.Error == "" || r.Deleted || r.DenyCacheDropped {
		t.Errorf("reset with Redis down = %d %s; want 503 with the error", code, body)
	}
	if c := s.counters(t, "user=alice").Descriptors[0].Counters[0]; c.DenyCache == nil {
		t.Error("a failed reset dropped the deny cache entry")
	}
	if s.resets != 0 {
		t.Errorf("a failed reset counted %d", s.resets)
	}
}
