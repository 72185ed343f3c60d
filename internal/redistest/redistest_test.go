package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t, WithArgs("--maxmemory", "10mb"))
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want a 127.0.0.1 address", s.Addr)
	}
	c := s.Client(t)

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want \"v\", nil", got, err)
	}
	if got, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "10485760" {
		t.Fatalf("CONFIG GET maxmemory = %v, %v; want 10485760", got, err)
	}
	if got, err := c.ConfigGet(ctx, "save").Result(); err != nil || got["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty", got, err)
	}

	s.Kill()
	s.Kill() // safe twice
	// A raw connection, as go-redis would spend a while retrying.
	if _, err := do(s.Addr, time.Second, "PING"); err == nil {
		t.Fatal("PING after Kill succeeded, want an error")
	}

	addr := s.Addr
	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Addr after Restart = %q, want %q", s.Addr, addr)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: %v, want redis.Nil (no persistence)", err)
	}
	if got, err := c.ConfigGet(ctx, "maxmemory").Result(); err != nil || got["maxmemory"] != "10485760" {
		t.Fatalf("CONFIG GET maxmemory after Restart = %v, %v; want 10485760", got, err)
	}
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
}

func TestServerPID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	c := s.Client(t)
	processID := func() string {
		t.Helper()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatalf("INFO server: %v", err)
		}
		return infoField(info, "process_id")
	}

	first := s.PID()
	if got := processID(); first <= 0 || fmt.Sprint(first) != got {
		t.Fatalf("PID() = %d, INFO process_id = %s; want them equal", first, got)
	}
	s.Restart(t)
	second := s.PID()
	if got := processID(); second == first || fmt.Sprint(second) != got {
		t.Fatalf("PID() after Restart = %d (was %d), INFO process_id = %s; want a new PID equal to process_id", second, first, got)
	}
}

func TestServersArePrivate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := StartServer(t), StartServer(t)
	if a.Addr == b.Addr {
		t.Fatalf("two servers share %s", a.Addr)
	}
	if err := a.Client(t).Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := b.Client(t).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET on other server: %v, want redis.Nil", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster of %v ready in %v", c.Addrs, time.Since(start).Round(time.Millisecond))
	if len(c.Addrs) != 3 {
		t.Fatalf("len(Addrs) = %d, want 3", len(c.Addrs))
	}
	cc := c.Client(t)

	// Write until every master holds a key, i.e. keys landed in slots
	// owned by different nodes.
	slots := make(map[int64]bool)
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		got, err := cc.Get(ctx, key).Int()
		if err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Fatalf("keys used %d slots, want several", len(slots))
	}

	var (
		mu      sync.Mutex
		masters []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("master %s holds no keys", m.Options().Addr)
		}
		info, err := m.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		for _, want := range []string{"cluster_state:ok", "cluster_size:3", "cluster_slots_ok:16384"} {
			if !strings.Contains(info, want) {
				return fmt.Errorf("master %s: CLUSTER INFO lacks %q:\n%s", m.Options().Addr, want, info)
			}
		}
		mu.Lock()
		masters = append(masters, m.Options().Addr)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 {
		t.Fatalf("masters = %v, want 3", masters)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel setup ready in %v", time.Since(start).Round(time.Millisecond))
	c := s.FailoverClient(t)

	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatalf("SET before failover: %v", err)
	}
	if addr := sentinelMaster(ctx, t, s); addr != s.Master.Addr {
		t.Fatalf("sentinel master = %s, want %s", addr, s.Master.Addr)
	}

	s.Master.Kill()
	killed := time.Now()
	var lastErr error
	for {
		opCtx, cancel := context.WithTimeout(ctx, time.Second)
		lastErr = c.Set(opCtx, "k", "after", 0).Err()
		cancel()
		if lastErr == nil {
			break
		}
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("no successful write within 20s of killing the master: %v", lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover took %v", time.Since(killed).Round(time.Millisecond))

	if addr := sentinelMaster(ctx, t, s); addr != s.Replica.Addr {
		t.Fatalf("sentinel master after failover = %s, want replica %s", addr, s.Replica.Addr)
	}
	if got, err := s.Replica.Client(t).Get(ctx, "k").Result(); err != nil || got != "after" {
		t.Fatalf("GET on promoted replica = %q, %v; want \"after\"", got, err)
	}
}

// sentinelMaster returns the master address the first sentinel reports.
func sentinelMaster(ctx context.Context, t *testing.T, s *Sentinel) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs[0]})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME: %v", err)
	}
	return strings.Join(addr, ":")
}

// fakeTB records how a helper ended the test.
type fakeTB struct {
	testing.TB
	mu      sync.Mutex
	fatal   string
	skipped string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// runHelper runs fn in its own goroutine, as a helper ending the test with
// Fatalf or Skipf exits the goroutine.
func runHelper(f *fakeTB, fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
}

func TestMissingRedis(t *testing.T) {
	// Not parallel: it changes PATH for the whole process, which Go
	// restores before the parallel tests resume.
	t.Setenv("PATH", t.TempDir())

	t.Setenv(SkipEnv, "")
	f := &fakeTB{TB: t}
	runHelper(f, func(tb testing.TB) { StartServer(tb) })
	if !strings.Contains(f.fatal, "make test") || f.skipped != "" {
		t.Errorf("without %s: fatal %q, skipped %q; want a fatal message mentioning make test", SkipEnv, f.fatal, f.skipped)
	}

	t.Setenv(SkipEnv, "1")
	f = &fakeTB{TB: t}
	runHelper(f, func(tb testing.TB) { StartCluster(tb) })
	if f.skipped == "" || f.fatal != "" {
		t.Errorf("with %s=1: fatal %q, skipped %q; want a skip", SkipEnv, f.fatal, f.skipped)
	}
}

// TestSentinelGracefulFailover: a graceful failover promotes the replica,
// which then takes writes.
func TestSentinelGracefulFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartSentinel(t)
	s.Failover(t)
	if addr := sentinelMaster(ctx, t, s); addr != s.Replica.Addr {
		t.Fatalf("sentinel master after failover = %s, want replica %s", addr, s.Replica.Addr)
	}
	if err := s.Replica.Client(t).Set(ctx, "k", "new", 0).Err(); err != nil {
		t.Fatalf("SET on the promoted replica: %v", err)
	}
}

// TestSentinels: several sentinels know each other, and all of them learn
// of a failover that one of them led.
func TestSentinels(t *testing.T) {
	t.Parallel()
	s := StartSentinels(t, 3)
	if len(s.SentinelAddrs) != 3 || len(s.Sentinels) != 3 {
		t.Fatalf("%d sentinel addresses and %d sentinels, want 3", len(s.SentinelAddrs), len(s.Sentinels))
	}
	s.Failover(t)
	err := poll(formTimeout, func() error {
		for _, addr := range s.SentinelAddrs {
			reply, err := do(addr, cmdTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
			if err != nil {
				return err
			}
			if got := fmt.Sprintf("%v", reply); got != fmt.Sprintf("[127.0.0.1 %d]", s.Replica.port) {
				return fmt.Errorf("sentinel %s names %s", addr, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("not every sentinel names the new master %s: %v", s.Replica.Addr, err)
	}
}

// TestClusterWithReplicas: a replicated cluster forms, and FailOver
// promotes the replica of a killed master.
func TestClusterWithReplicas(t *testing.T) {
	c := StartClusterWithReplicas(t)
	if len(c.Nodes) != clusterSize || len(c.Replicas) != clusterSize {
		t.Fatalf("%d masters and %d replicas, want %d of each", len(c.Nodes), len(c.Replicas), clusterSize)
	}
	took := c.FailOver(t, 0)
	t.Logf("replica promoted %v after its master was killed", took)
	info, err := doString(c.Replicas[0].Addr, cmdTimeout, "CLUSTER", "INFO")
	if err != nil {
		t.Fatal(err)
	}
	if got := infoField(info, "cluster_state"); got != "ok" {
		t.Errorf("cluster_state %q after the failover, want ok", got)
	}
}
