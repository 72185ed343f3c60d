package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// sidecar is a running serve() for a test.
type sidecar struct {
	grpcAddr, httpAddr string
	adminAddr          string // httpAddr unless --admin-addr is set
	debugAddr          string // "" without a debug listener
	metricsAddr        string // "" without a metrics listener of its own
	dir                string // the rules directory sidecarOpts.rules was written to
	rls                rlsv3.RateLimitServiceClient
	health             healthpb.HealthClient
	log                *logtest.Buffer    // everything serve logged
	cancel             context.CancelFunc // as SIGTERM does
	stop               func() error       // cancels and waits for serve to return
}

// sidecarOpts says how startSidecar starts serve().
type sidecarOpts struct {
	// args is the command line. Unless argv0 is set, it follows
	// --grpc-addr and --http-addr on 127.0.0.1:0.
	args []string
	env  map[string]string // the environment; nil: empty
	// argv0 is the program run (os.Args[0]); "" is ratelimit-sidecar.
	// When set, listeners come from args and env alone, and serve sees
	// env as the whole environment (its start report lists it).
	argv0 string
	// rules, if set, is written to rules.yaml in a new directory (s.dir),
	// which the command line then starts with as --config.
	rules string
	log   io.Writer // if set, also gets the log
}

// startSidecar starts serve() as o says, waits for it to listen, and stops
// it when the test ends.
func startSidecar(t testing.TB, o sidecarOpts) *sidecar {
	t.Helper()
	s := &sidecar{log: &logtest.Buffer{}}
	args := o.args
	if o.rules != "" {
		s.dir = t.TempDir()
		write(t, filepath.Join(s.dir, "rules.yaml"), o.rules)
		args = append([]string{"--config", s.dir}, args...)
	}
	var c *settings
	var err error
	if o.argv0 == "" {
		args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...)
		c, err = parseFlags(args, func(k string) (string, bool) { v, ok := o.env[k]; return v, ok }, io.Discard)
	} else {
		c, err = parseEnv(o.argv0, o.env, args...)
	}
	if err != nil {
		t.Fatal(err)
	}
	var logw io.Writer = s.log
	if o.log != nil {
		logw = io.MultiWriter(s.log, o.log)
	}
	ready := make(chan struct{}, 1)
	c.onReady = func(a listenAddrs) {
		s.grpcAddr, s.httpAddr, s.adminAddr, s.debugAddr, s.metricsAddr = a.grpc, a.http, a.admin, a.debug, a.metrics
		ready <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c, logw) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve returned early: %v\n%s", err, s.log)
	}
	var once sync.Once
	var serr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serr = <-done:
			case <-time.After(15 * time.Second):
				serr = errors.New("serve did not stop within 15s")
			}
		})
		return serr
	}
	target := s.grpcAddr
	if c.addrs.grpcUDS != "" {
		target = "unix://" + s.grpcAddr
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.rls = rlsv3.NewRateLimitServiceClient(conn)
	s.health = healthpb.NewHealthClient(conn)
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
		conn.Close()
	})
	return s
}

func (s *sidecar) get(t *testing.T, path string) (int, string) {
	t.Helper()
	r, err := http.Get("http://" + s.httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricValue returns the value of the sample line that starts with
// series on s's /metrics, -1 if there is none.
func metricValue(t *testing.T, s *sidecar, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s.getBody(t, "/metrics")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return -1
}

func userRequest(user string, hits uint32) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
	}}
}

// userRules allows 3 an hour to each user. An hour, not a minute: the
// tests count across several requests, and a fixed window starts again at
// each boundary of the clock, so a test that crossed one would see its
// counts vanish.
const userRules = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n"

func TestMetricsDebugConfigAndSIGHUP(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--reload-debounce", "1h"}}) // only SIGHUP reloads here
	ctx := context.Background()
	for range 4 {
		if _, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0)); err != nil {
			t.Fatal(err)
		}
	}
	_, body := s.get(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_decisions_total{result="ok"} 3`,
		`ratelimit_sidecar_decisions_total{result="over_limit"} 1`,
		`ratelimit_sidecar_rule_within_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1h0m0s"} 3`,
		`ratelimit_sidecar_rule_over_limit_total{algorithm="fixed_window",domain="edge",rule="user",window="1h0m0s"} 1`,
		`ratelimit_sidecar_store_duration_seconds_count{store="memory"} 4`,
		`ratelimit_sidecar_config_last_reload_successful 1`,
		`ratelimit_sidecar_build_info{goversion="`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	var before admin.ConfigView
	_, body = s.get(t, "/debug/config")
	if err := json.Unmarshal([]byte(body), &before); err != nil {
		t.Fatalf("/debug/config: %v\n%s", err, body)
	}
	if before.Checksum == "" || len(before.Domains["edge"].Descriptors) != 1 || before.Domains["edge"].Descriptors[0].Limits[0].RequestsPerUnit != 3 {
		t.Fatalf("/debug/config = %s", body)
	}

	// A bad file and SIGHUP: rejected, the old rules keep serving.
	write(t, filepath.Join(dir, "rules.yaml"), strings.Replace(userRules, "hour", "fortnight", 1))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return metricValue(t, s, "ratelimit_sidecar_config_last_reload_successful") == 0 })
	if _, body = s.get(t, "/debug/config"); !strings.Contains(body, `rules.yaml:4: descriptors[0].rate_limit.unit: unknown unit \"fortnight\"`) {
		t.Errorf("/debug/config does not show the reload error:\n%s", body)
	}
	// A good file and SIGHUP: new rules, counters kept (3 used of 5).
	write(t, filepath.Join(dir, "rules.yaml"), strings.Replace(userRules, "3}", "5}", 1))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return metricValue(t, s, "ratelimit_sidecar_config_last_reload_successful") == 1 })
	resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("after reload to 5/min: %v; want OK with 1 remaining (3 used before the reload)", resp)
	}
}

func (s *sidecar) getBody(t *testing.T, path string) string {
	_, b := s.get(t, path)
	return b
}

// TestShutdownUnderLoad cancels the sidecar while clients send requests.
// Clients stop sending once health says NOT_SERVING, as Envoy would; every
// request they sent must succeed.
func TestShutdownUnderLoad(t *testing.T) {
	s := startSidecar(t, sidecarOpts{args: []string{"--config", "../../config/", "--drain-delay", "300ms"}})
	ctx := context.Background()
	var sent, failed atomic.Int64
	var draining atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !draining.Load() {
			h, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
			if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				draining.Store(true)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	for g := range 8 {
		wg.Go(func() {
			for i := 0; i < 20000 && !draining.Load(); i++ {
				sent.Add(1)
				if _, err := s.rls.ShouldRateLimit(ctx, userRequest(fmt.Sprint("u", g, "-", i), 0)); err != nil {
					failed.Add(1)
					t.Errorf("in-flight request failed: %v", err)
					return
				}
			}
		})
	}
	waitFor(t, func() bool { return sent.Load() >= 100 }) // load under way
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	draining.Store(true)
	wg.Wait()
	if sent.Load() < 100 || failed.Load() != 0 {
		t.Errorf("sent %d requests, %d failed; want some sent and none failed", sent.Load(), failed.Load())
	}
}

// TestDenyCache checks the wiring of the Redis store, under
// --redis-key-prefix and ready, and of its deny cache: once Redis has
// said a key is over its limit, later requests for it are answered by the
// cache and counted, and a reload empties the cache. That the cache
// answers without a Redis call, and never differently from Redis, is
// pkg/store's TestDenyCacheSteps and TestDenyCacheExactAgainstRedis.
func TestDenyCache(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--reload-debounce", "10ms", "--redis-key-prefix", "t1:"}})
	codes := func(n int) string {
		var out []string
		for range n {
			resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 1))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, resp.OverallCode.String())
		}
		return strings.Join(out, " ")
	}
	if got, want := codes(6), "OK OK OK OVER_LIMIT OVER_LIMIT OVER_LIMIT"; got != want {
		t.Fatalf("codes = %s, want %s", got, want)
	}
	if body := s.getBody(t, "/metrics"); !strings.Contains(body, "ratelimit_sidecar_deny_cache_answered_total 2") {
		t.Errorf("/metrics lacks deny_cache_answered_total 2")
	}
	if keys, err := srv.Client(t).Keys(context.Background(), "t1:*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("keys in Redis with the prefix: %v, %v; want the counter", keys, err)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}

	// New rules, with a higher limit under the same key: the cache must
	// forget the old answer.
	write(t, filepath.Join(dir, "rules.yaml"), strings.Replace(userRules, "requests_per_unit: 3", "requests_per_unit: 5", 1))
	waitFor(t, func() bool {
		return strings.Contains(s.getBody(t, "/metrics"), `ratelimit_sidecar_config_reloads_total{result="success"} 1`)
	})
	if got, want := codes(3), "OK OK OVER_LIMIT"; got != want {
		t.Errorf("after the reload: codes = %s, want %s", got, want)
	}
}

// TestRedisDownAtStartup starts the sidecar with Redis down: it must serve
// by its failure mode at once, say so on /readyz, and use Redis once it
// comes up.
func TestRedisDownAtStartup(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--failure-mode", "closed"}})
	resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("with Redis down and failure mode closed: %v, want OVER_LIMIT", resp.OverallCode)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusOK || !strings.Contains(body, "store unavailable") {
		t.Errorf("/readyz = %d %q; want 200 saying the store is unavailable", code, body)
	}
	srv.Restart(t)
	waitFor(t, func() bool {
		resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest("bob", 0))
		return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK
	})
}

// TestJSONEndpointWithHeaders posts to /json on a sidecar started with
// --response-headers ietf: 200 with the policy and state, then 429 with
// Retry-After.
func TestJSONEndpointWithHeaders(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--response-headers", "ietf"}})
	post := func() (*http.Response, string) {
		t.Helper()
		body := `{"domain":"edge","hitsAddend":3,"descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}`
		r, err := http.Post("http://"+s.httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r, string(b)
	}
	r, body := post()
	if r.StatusCode != http.StatusOK || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Fatalf("first POST /json = %d %s", r.StatusCode, body)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=3600` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	r, body = post()
	if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("second POST /json = %d %s", r.StatusCode, body)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After on 429; headers %v", r.Header)
	}
}

// TestLeasesGivenBackAtShutdown: a sidecar that stops holding part of a
// lease gives it back to Redis, so the next sidecar sees only the hits
// admitted.
func TestLeasesGivenBackAtShutdown(t *testing.T) {
	srv := redistest.StartServer(t)
	leasedDir, plainDir := t.TempDir(), t.TempDir()
	const rules = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100%s}\n"
	write(t, filepath.Join(leasedDir, "rules.yaml"), fmt.Sprintf(rules, ", lease: 10"))
	write(t, filepath.Join(plainDir, "rules.yaml"), fmt.Sprintf(rules, ""))
	redisURL := "redis://" + srv.Addr

	s := startSidecar(t, sidecarOpts{args: []string{"--config", leasedDir, "--redis-url", redisURL}})
	for range 3 {
		resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 1))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("leased request: %v, %v", resp, err)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	p := startSidecar(t, sidecarOpts{args: []string{"--config", plainDir, "--redis-url", redisURL}})
	resp, err := p.rls.ShouldRateLimit(context.Background(), userRequest("alice", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].LimitRemaining; got != 100-3-1 {
		t.Errorf("remaining %d after 3 leased requests and one more, want %d: the stopped sidecar's lease given back", got, 100-3-1)
	}
}

// TestRedisPasswordOnCommandLine: a password in --redis-url on the
// command line, where ps shows it, earns one warning at start that points
// at the environment variable and the password file; a password from
// those earns none. No log line holds the password.
func TestRedisPasswordOnCommandLine(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill() // the sidecar starts without Redis; only its log matters
	pwFile := filepath.Join(t.TempDir(), "pw")
	write(t, pwFile, "s3cret\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want int // warnings
	}{
		{name: "password in args", args: []string{"--redis-url", "redis://:s3cret@" + srv.Addr}, want: 1},
		{name: "user and password in args", args: []string{"--redis-url=redis://app:s3cret@" + srv.Addr + "/0"}, want: 1},
		{name: "user only in args", args: []string{"--redis-url", "redis://app@" + srv.Addr}},
		{name: "password in RLS_REDIS_URL", env: map[string]string{"RLS_REDIS_URL": "redis://:s3cret@" + srv.Addr}},
		{name: "password in RLS_REDIS_PASSWORD", args: []string{"--redis-url", "redis://" + srv.Addr}, env: map[string]string{"RLS_REDIS_PASSWORD": "s3cret"}},
		{name: "password file", args: []string{"--redis-url", "redis://" + srv.Addr, "--redis-password-file", pwFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startSidecar(t, sidecarOpts{args: append([]string{"--config", "../../config/"}, tt.args...), env: tt.env})
			if err := s.stop(); err != nil {
				t.Fatal(err)
			}
			log := s.log
			if strings.Contains(log.String(), "s3cret") {
				t.Errorf("the log holds the password:\n%s", log.String())
			}
			var warnings []string
			for _, line := range strings.Split(log.String(), "\n") {
				if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "password") {
					warnings = append(warnings, line)
				}
			}
			if len(warnings) != tt.want {
				t.Fatalf("%d warnings about the password, want %d:\n%s", len(warnings), tt.want, log.String())
			}
			for _, w := range warnings {
				for _, want := range []string{"RLS_REDIS_URL", "--redis-password-file", "ps"} {
					if !strings.Contains(w, want) {
						t.Errorf("warning does not mention %s: %s", want, w)
					}
				}
			}
		})
	}
}
