package statsd_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsdtest"
)

// TestSettingsCheck: with --statsd-addr, bad values are errors naming
// the flag; without it they are not read.
func TestSettingsCheck(t *testing.T) {
	good := statsd.Settings{Addr: "statsd:8125", Protocol: "udp", Format: "statsd", Interval: time.Second}
	tests := []struct {
		give func(*statsd.Settings)
		want string
	}{
		{func(s *statsd.Settings) { s.Tags = "team" }, `--statsd-tags: want key=value entries, got "team"`},
		{func(s *statsd.Settings) { s.Tags = "a=b, =c" }, `--statsd-tags: want key=value entries, got "=c"`},
		{func(s *statsd.Settings) { s.Mogrifiers = `[{"pattern":"a","name":"b"}]` }, "--statsd-mogrifiers: needs --statsd-format dogstatsd"},
		{func(s *statsd.Settings) { s.Format, s.Mogrifiers = "dogstatsd", `[{"pattern":"(","name":"b"}]` }, "--statsd-mogrifiers[0].pattern: error parsing regexp"},
		{func(s *statsd.Settings) { s.Format, s.Mogrifiers = "dogstatsd", `[{"pattern":"a"}]` }, "--statsd-mogrifiers[0]: no name"},
		{func(s *statsd.Settings) { s.Format, s.Mogrifiers = "dogstatsd", `[{"pattern":"a","name":"b","x":1}]` }, `--statsd-mogrifiers: want a JSON list of {"pattern", "name", "tags"}: json: unknown field "x"`},
		{func(s *statsd.Settings) { s.Protocol = "unix" }, `--statsd-protocol: want udp, tcp or unixgram, got "unix"`},
		{func(s *statsd.Settings) { s.Addr = "statsd" }, `--statsd-addr: want host:port, got "statsd"`},
		{func(s *statsd.Settings) { s.Format = "graphite" }, "--statsd-format: "},
		{func(s *statsd.Settings) { s.Interval = 0 }, "--statsd-flush-interval: want more than 0, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			s := good
			tt.give(&s)
			if err := s.Check(noEnv); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check() = %v, want it to say %s", err, tt.want)
			}
			s.Addr = ""
			if err := s.Check(noEnv); err != nil {
				t.Errorf("without --statsd-addr: Check() = %v, want nil", err)
			}
		})
	}
	unix := statsd.Settings{Addr: "/var/run/datadog/dsd.socket", Protocol: "unixgram", Format: "dogstatsd", Interval: time.Second}
	if err := unix.Check(noEnv); err != nil {
		t.Errorf("a unixgram socket's path: %v", err)
	}
}

func noEnv(string) (string, bool) { return "", false }

// TestSettingsStart: the settings a DogStatsD receiver is configured
// with (tags, a mogrifier, Datadog's DD_ENV) reach what it receives; Stop
// flushes once more, and is safe twice; without an address nothing
// starts.
func TestSettingsStart(t *testing.T) {
	rcv := statsdtest.Start(t, "udp", "", true)
	s := statsd.Settings{Addr: rcv.Addr, Protocol: "udp", Format: "dogstatsd", Tags: "cluster=eu-west", Interval: time.Hour,
		Mogrifiers: `[{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"domain":"$1","descriptor":"$2"}}]`}
	if err := s.Check(func(k string) (string, bool) { return "prod", k == "DD_ENV" }); err != nil {
		t.Fatal(err)
	}
	sc := newSidecar(t)
	log, buf := logtest.JSON(zap.InfoLevel)
	p, err := s.Start(metrics.NewReference(sc.m.Registry, sc.e.Rules), sc.m.PushErrors("statsd"), log)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		sc.decide(t, "user", "alice")
	}
	p.Stop()
	p.Stop()
	tags := map[string]string{"env": "prod", "cluster": "eu-west", "domain": "edge", "descriptor": "user"}
	ok := rcv.Wait(10*time.Second, func() bool {
		hits, _ := rcv.Value("ratelimit_service_rate_limit_total_hits", tags)
		over, _ := rcv.Value("ratelimit_service_rate_limit_over_limit", tags)
		return hits == 3 && over == 1
	})
	if !ok {
		t.Errorf("no tagged total_hits 3 and over_limit 1: series %q, lines %q", rcv.Names(), rcv.Lines())
	}
	if lines := buf.Lines(t, "pushing stats to statsd"); len(lines) != 1 || lines[0]["format"] != "dogstatsd" || lines[0]["protocol"] != "udp" {
		t.Errorf("start lines %v", lines)
	}

	s.Addr = ""
	if p, err := s.Start(nil, nil, log); p != nil || err != nil {
		t.Errorf("without an address: Start() = %v, %v; want nil, nil", p, err)
	}
	p = nil
	p.Stop()
}
