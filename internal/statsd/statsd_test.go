package statsd_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsdtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rules = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// sidecar is the metrics of an engine that decides on a memory store.
type sidecar struct {
	m *metrics.Metrics
	e *limits.Engine
}

func newSidecar(t *testing.T) *sidecar {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "test"}, 0.5, metrics.DefaultMaxValues)
	clk := storetest.NewClock(storetest.Epoch)
	return &sidecar{m: m, e: limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{Observer: m})}
}

func (s *sidecar) decide(t *testing.T, entries ...string) {
	t.Helper()
	var d limits.Descriptor
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, limits.Entry{Key: entries[i], Value: entries[i+1]})
	}
	var dec limits.Decision
	if err := s.e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{d}}, &dec); err != nil {
		t.Fatal(err)
	}
}

func (s *sidecar) sink(t *testing.T, o statsd.Options) *statsd.Sink {
	t.Helper()
	o.Source = metrics.NewReference(s.m.Registry, s.e.Rules)
	o.Errors = s.m.PushErrors("statsd")
	sk, err := statsd.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sk.Close)
	return sk
}

func readMapping(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/envoy-gateway-statsd_conf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnvoyGatewayMapping: what a Sink sends, over UDP and over TCP (the
// reference's statsd client's), becomes in a real statsd_exporter with
// Envoy Gateway's mapping the Prometheus series the reference's stats
// become there, with the same counts; a second flush sends only what
// changed, so the exporter's counters follow ours.
func TestEnvoyGatewayMapping(t *testing.T) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			rcv := statsdtest.Start(t, network, readMapping(t), false)
			s := newSidecar(t)
			sk := s.sink(t, statsd.Options{Addr: rcv.Addr, Network: network})
			for range 3 {
				s.decide(t, "user", "alice")
			}
			for range 2 {
				s.decide(t, "tenant", "acme", "user", "bob")
			}
			s.decide(t, "ip", "10.0.0.1")
			s.decide(t, "plan", "gold")
			s.decide(t, "plan", "gold")
			if err := sk.Flush(); err != nil {
				t.Fatal(err)
			}
			want := []series{
				{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edge", "key1": "user"}, 3},
				{"ratelimit_service_rate_limit_within_limit", map[string]string{"domain": "edge", "key1": "user"}, 2},
				{"ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "edge", "key1": "user"}, 1},
				{"ratelimit_service_rate_limit_near_limit", map[string]string{"domain": "edge", "key1": "user"}, 2},
				{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edge", "key1": "tenant_acme", "key2": "user"}, 2},
				{"ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "edge", "key1": "tenant_acme", "key2": "user"}, 1},
				{"ratelimit_service_rate_limit_total_hits", map[string]string{"domain": "edge", "key1": "ip"}, 1},
				{"ratelimit_service_rate_limit_shadow_mode", map[string]string{"domain": "edge", "key1": "plan"}, 1},
				{"ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"}, 8},
				{"ratelimit_service_response_time_seconds", map[string]string{"grpc_method": "ShouldRateLimit"}, 8},
				{"ratelimit_service_config_load_success", map[string]string{}, 1},
			}
			waitSeries(t, rcv, want)

			for range 2 {
				s.decide(t, "user", "carol")
			}
			if err := sk.Flush(); err != nil {
				t.Fatal(err)
			}
			// user: hits, within_limit, near_limit; requests and times.
			want[0].value, want[1].value, want[3].value = 5, 4, 4
			want[8].value, want[9].value = 10, 10
			waitSeries(t, rcv, want)
			if errs := rcv.SampleErrors(); len(errs) > 0 {
				t.Errorf("statsd_exporter refused samples: %v; lines %q", errs, rcv.Lines())
			}
			if n := testutil.ToFloat64(s.m.PushErrors("statsd")); n != 0 {
				t.Errorf("push errors = %v, want 0", n)
			}
		})
	}
}

type series struct {
	name   string
	labels map[string]string
	value  float64
}

func waitSeries(t *testing.T, rcv *statsdtest.Receiver, want []series) {
	t.Helper()
	match := func() bool {
		for _, w := range want {
			if v, ok := rcv.Value(w.name, w.labels); !ok || v != w.value {
				return false
			}
		}
		return true
	}
	if rcv.Wait(30*time.Second, match) {
		return
	}
	for _, w := range want {
		v, ok := rcv.Value(w.name, w.labels)
		if !ok || v != w.value {
			t.Errorf("%s%v = %v (found %v), want %v", w.name, w.labels, v, ok, w.value)
		}
	}
	t.Logf("lines: %q", rcv.Lines())
	t.Logf("series: %q", rcv.Names())
}

// dogLine is a strict DogStatsD line: name:value|type, then an optional
// sample rate and optional tags, nothing else.
var dogLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.]*):(-?[0-9]+(?:\.[0-9]+)?)\|(c|ms|g)(?:\|@([0-9.e-]+))?(?:\|#([^|]+))?$`)

type dogStat struct {
	name  string
	value float64
	kind  string
	rate  float64
	tags  []string
}

func parseDog(t *testing.T, line string) dogStat {
	t.Helper()
	m := dogLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("not a DogStatsD line: %q", line)
	}
	v, _ := strconv.ParseFloat(m[2], 64)
	st := dogStat{name: m[1], value: v, kind: m[3], rate: 1}
	if m[4] != "" {
		r, err := strconv.ParseFloat(m[4], 64)
		if err != nil || r <= 0 || r > 1 {
			t.Fatalf("sample rate of %q", line)
		}
		st.rate = r
	}
	if m[5] != "" {
		for _, tag := range strings.Split(m[5], ",") {
			k, val, ok := strings.Cut(tag, ":")
			if !ok || k == "" || val == "" {
				t.Fatalf("tag %q of %q: want key:value", tag, line)
			}
			st.tags = append(st.tags, tag)
		}
	}
	return st
}

// TestDogStatsDTags: in DogStatsD format every line parses strictly,
// carries the extra tags (values sanitized as the reference's client
// does), and a mogrifier renames the per-rule stats and tags them with
// its groups, the first mogrifier that matches winning.
func TestDogStatsDTags(t *testing.T) {
	rcv := statsdtest.Start(t, "udp", "", true)
	s := newSidecar(t)
	sk := s.sink(t, statsd.Options{Addr: rcv.Addr, Network: "udp", Format: statsd.DogStatsD,
		Tags: map[string]string{"cluster": "eu.west:1", "team": "edge", "empty": ""},
		Mogrifiers: []statsd.Mogrifier{
			{Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`), Name: "ratelimit.service.rate_limit.$3",
				Tags: map[string]string{"domain": "$1", "descriptor": "$2"}},
			{Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.(.*)$`), Name: "never.$1"},
			{Pattern: regexp.MustCompile(`^ratelimit\.service\.config_load_(.*)$`), Name: "ratelimit.service.config_load", Tags: map[string]string{"result": "$1"}},
		}})
	for range 3 {
		s.decide(t, "tenant", "acme", "user", "bob")
	}
	if err := sk.Flush(); err != nil {
		t.Fatal(err)
	}
	want := map[string]dogStat{
		"ratelimit.service.rate_limit.total_hits|c":         {value: 3, tags: []string{"cluster:eu_west_1", "team:edge", "descriptor:tenant_acme.user", "domain:edge"}},
		"ratelimit.service.rate_limit.over_limit|c":         {value: 2, tags: []string{"cluster:eu_west_1", "team:edge", "descriptor:tenant_acme.user", "domain:edge"}},
		"ratelimit_server.ShouldRateLimit.total_requests|c": {value: 3, tags: []string{"cluster:eu_west_1", "team:edge"}},
		"ratelimit.service.config_load|c":                   {value: 1, tags: []string{"cluster:eu_west_1", "team:edge", "result:success"}},
	}
	var lines []string
	rcv.Wait(30*time.Second, func() bool {
		lines = rcv.Lines()
		return strings.Contains(strings.Join(lines, "\n"), "ratelimit_server.ShouldRateLimit.response_time")
	})
	got := map[string]dogStat{}
	var timed float64
	for _, l := range lines {
		st := parseDog(t, l)
		if strings.HasPrefix(st.name, "never.") {
			t.Errorf("%q: the second mogrifier applied to a name the first matched", l)
		}
		if st.name == "ratelimit_server.ShouldRateLimit.response_time" {
			timed += 1 / st.rate
			continue
		}
		got[st.name+"|"+st.kind] = st
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("no %s in %q", k, lines)
			continue
		}
		if g.value != w.value || strings.Join(g.tags, ",") != strings.Join(w.tags, ",") {
			t.Errorf("%s = %v %v, want %v %v", k, g.value, g.tags, w.value, w.tags)
		}
	}
	if int(timed+0.5) != 3 {
		t.Errorf("response_time timers count %v observations, want 3; lines %q", timed, lines)
	}
	// statsd_exporter's own DogStatsD parser takes every line too.
	if errs := rcv.SampleErrors(); len(errs) > 0 {
		t.Errorf("statsd_exporter refused samples: %v", errs)
	}
	if v, ok := rcv.Value("ratelimit_service_rate_limit_total_hits", map[string]string{"cluster": "eu_west_1", "team": "edge", "descriptor": "tenant_acme.user", "domain": "edge"}); !ok || v != 3 {
		t.Errorf("statsd_exporter's tagged total_hits = %v (found %v), want 3; series %q", v, ok, rcv.Names())
	}
}

// TestStatsdTagsInNames: in plain statsd format the extra tags go into
// the name as the reference's client puts them, .__key=value sorted by
// key, which statsd_exporter reads as labels.
func TestStatsdTagsInNames(t *testing.T) {
	rcv := statsdtest.Start(t, "tcp", "", false)
	s := newSidecar(t)
	sk := s.sink(t, statsd.Options{Addr: rcv.Addr, Network: "tcp", Tags: map[string]string{"b": "2", "a": "x.y"}})
	s.decide(t, "user", "alice")
	if err := sk.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "ratelimit.service.rate_limit.edge.user.total_hits.__a=x_y.__b=2:1|c"
	if !rcv.Wait(30*time.Second, func() bool { return slicesContains(rcv.Lines(), want) }) {
		t.Fatalf("no line %q in %q", want, rcv.Lines())
	}
}

func slicesContains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// TestDeadReceiver: a receiver that is not there (TCP refused, UDP port
// closed) or that does not read (a full socket) fails the flush within
// the timeout, counted, and the decisions never wait for it; what was
// not sent is sent once the receiver is back.
func TestDeadReceiver(t *testing.T) {
	t.Run("tcp refused", func(t *testing.T) {
		s := newSidecar(t)
		addr := closedPort(t, "tcp")
		sk := s.sink(t, statsd.Options{Addr: addr, Network: "tcp"})
		s.decide(t, "user", "alice")
		if err := sk.Flush(); err == nil {
			t.Fatal("flush to a closed port succeeded")
		}
		if n := testutil.ToFloat64(s.m.PushErrors("statsd")); n != 1 {
			t.Errorf("push errors = %v, want 1", n)
		}
		// The receiver comes back: the next flush sends what the
		// failed one did not.
		rcv := statsdtest.StartOn(t, "tcp", addr, "", false)
		s.decide(t, "user", "alice")
		if err := sk.Flush(); err != nil {
			t.Fatal(err)
		}
		want := "ratelimit.service.rate_limit.edge.user.total_hits:2|c"
		if !rcv.Wait(30*time.Second, func() bool { return slicesContains(rcv.Lines(), want) }) {
			t.Errorf("no %q once the receiver is back: %q", want, rcv.Lines())
		}
	})
	t.Run("udp port closed", func(t *testing.T) {
		s := newSidecar(t)
		sk := s.sink(t, statsd.Options{Addr: closedPort(t, "udp"), Network: "udp"})
		// A closed UDP port answers a datagram with an ICMP error that
		// fails a later write; on loopback, the next one.
		var failed bool
		for i := 0; i < 50 && !failed; i++ {
			s.decide(t, "user", "alice")
			failed = sk.Flush() != nil
		}
		if !failed || testutil.ToFloat64(s.m.PushErrors("statsd")) == 0 {
			t.Error("flushes to a closed UDP port never failed, or were not counted")
		}
	})
	t.Run("tcp full", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := lis.Accept()
			if err == nil {
				accepted <- c // never read
			}
			close(accepted)
		}()
		s := newSidecar(t)
		src := &bigSource{ref: metrics.NewReference(s.m.Registry, s.e.Rules)}
		sk, err := statsd.New(statsd.Options{Addr: lis.Addr().String(), Network: "tcp", Timeout: 100 * time.Millisecond,
			Source: src, Errors: s.m.PushErrors("statsd")})
		if err != nil {
			t.Fatal(err)
		}
		defer sk.Close()
		// Each flush sends ~1 MB more; the socket's buffers fill within
		// a few, then a write waits out the timeout and fails.
		var failed bool
		for i := 0; i < 200 && !failed; i++ {
			src.n++
			// Decisions go on while the sink is stuck in its write.
			done := make(chan error, 1)
			go func() { done <- sk.Flush() }()
			s.decide(t, "user", "alice")
			failed = <-done != nil
		}
		if !failed {
			t.Fatal("flushes to a receiver that never reads never failed")
		}
		if n := testutil.ToFloat64(s.m.PushErrors("statsd")); n != 1 {
			t.Errorf("push errors = %v, want 1", n)
		}
		if c, ok := <-accepted; ok {
			c.Close()
		}
	})
}

// bigSource sends many stats, each grown at each flush.
type bigSource struct {
	ref *metrics.Reference
	n   int
}

func (b *bigSource) Stats() []metrics.RefStat {
	out := b.ref.Stats()
	for i := range 20000 {
		out = append(out, metrics.RefStat{Name: "ratelimit.service.rate_limit.padding.key_" + strconv.Itoa(i) + ".total_hits", Value: float64(b.n)})
	}
	return out
}

// closedPort returns a loopback address on network that nothing listens
// on: one that was just listened on and closed.
func closedPort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := c.LocalAddr().String()
		c.Close()
		return addr
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// TestRun: Run flushes at its interval and once more when its context
// ends, then returns.
func TestRun(t *testing.T) {
	rcv := statsdtest.Start(t, "udp", "", false)
	s := newSidecar(t)
	sk := s.sink(t, statsd.Options{Addr: rcv.Addr, Network: "udp"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sk.Run(ctx, time.Hour)
	}()
	s.decide(t, "user", "alice")
	cancel()
	<-done
	if !rcv.Wait(30*time.Second, func() bool {
		return slicesContains(rcv.Lines(), "ratelimit.service.rate_limit.edge.user.total_hits:1|c")
	}) {
		t.Fatalf("no final flush: %q", rcv.Lines())
	}
}

// TestDogStatsDUnixSocket: DogStatsD goes to a Datadog agent's Unix
// socket too, and carries the tags a Datadog client adds from DD_ENV,
// DD_SERVICE, DD_VERSION and DD_ENTITY_ID first.
func TestDogStatsDUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dsd.socket")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	env := map[string]string{"DD_ENV": "prod", "DD_SERVICE": "ratelimit", "DD_VERSION": "1.2.3", "DD_AGENT_HOST": "ignored"}
	s := newSidecar(t)
	sk := s.sink(t, statsd.Options{Addr: path, Network: "unixgram", Format: statsd.DogStatsD, Tags: map[string]string{"team": "edge"},
		GlobalTags: statsd.DatadogEnvTags(func(k string) (string, bool) { v, ok := env[k]; return v, ok })})
	s.decide(t, "user", "alice")
	if err := sk.Flush(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, statsd.MaxUnixDatagram)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, l := range strings.Split(string(buf[:n]), "\n") {
		st := parseDog(t, l)
		if got, want := strings.Join(st.tags, ","), "env:prod,service:ratelimit,version:1.2.3,team:edge"; got != want {
			t.Errorf("%q: tags %s, want %s", l, got, want)
		}
		found = found || st.name == "ratelimit.service.rate_limit.edge.user.total_hits" && st.value == 1
	}
	if !found {
		t.Errorf("no total_hits of 1 in %q", buf[:n])
	}
}
