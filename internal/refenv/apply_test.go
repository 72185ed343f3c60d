package refenv_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestApply: on a flag set of its own, variables set the flags they map
// onto, leave the explicit ones alone, give the password aside, and name
// what is refused.
func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "")
	logLevel := fs.String("log-level", "info", "")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:8081", "")
	env := map[string]string{
		"PORT": "9090", "LOG_LEVEL": "Warning", "GRPC_PORT": "7000", "EXPIRATION_JITTER_MAX_SECONDS": "60",
	}
	a, err := refenv.Apply(fs, false, lookup(env), map[string]bool{"grpc-addr": true})
	if err != nil {
		t.Fatal(err)
	}
	if *httpAddr != "0.0.0.0:9090" || *logLevel != "warn" {
		t.Errorf("--http-addr=%s --log-level=%s, want 0.0.0.0:9090 and warn", *httpAddr, *logLevel)
	}
	if *grpcAddr != "127.0.0.1:8081" {
		t.Errorf("--grpc-addr=%s: set by GRPC_PORT although the command line set it", *grpcAddr)
	}
	if a.ByFlag["http-addr"] != "PORT" || a.ByDefault["http-addr"] {
		t.Errorf("http-addr from %q (by default %v), want PORT", a.ByFlag["http-addr"], a.ByDefault["http-addr"])
	}
	if len(a.Refused) != 1 || !strings.HasPrefix(a.Refused[0], "EXPIRATION_JITTER_MAX_SECONDS: ") {
		t.Errorf("refused %q, want EXPIRATION_JITTER_MAX_SECONDS alone", a.Refused)
	}

	// Each bad value is named by its variable, all at once.
	_, err = refenv.Apply(flag.NewFlagSet("", flag.ContinueOnError), false,
		lookup(map[string]string{"PORT": "http", "LOG_LEVEL": "loud"}), nil)
	for _, want := range []string{`PORT: want an integer, got "http"`, `LOG_LEVEL: want trace, debug, info, warn, error, fatal or panic, got "loud"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %s", err, want)
		}
	}

	if !refenv.IsRefMode("/bin/ratelimit") || refenv.IsRefMode("/bin/ratelimit-sidecar") {
		t.Error("IsRefMode: want /bin/ratelimit alone")
	}
}

// TestApplyFlagless: the reference's tuning that has no flag of ours
// (XDS_CLIENT_*, TRACING_SERVICE_*) lands in Applied.Settings, named by
// its variables, instead of on a flag.
func TestApplyFlagless(t *testing.T) {
	env := map[string]string{
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "30s",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2", "XDS_CLIENT_BACKOFF_JITTER": "false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "16777216", "TRACING_SERVICE_NAME": "rl",
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.Bool("tracing", false, "")
	fs.Float64("tracing-sampling-rate", 1, "")
	a, err := refenv.Apply(fs, false, lookup(env), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		refenv.XDSBackoffInitial: "2s", refenv.XDSBackoffMax: "30s", refenv.XDSBackoffJitter: "0",
		refenv.XDSMaxMessageBytes: "16777216", refenv.TracingServiceName: "rl",
	}
	for k, v := range want {
		if a.Settings[k] != v {
			t.Errorf("Settings[%s] = %q, want %q (all: %v)", k, a.Settings[k], v, a.Settings)
		}
	}
	if from := a.ByFlag[refenv.XDSMaxMessageBytes]; from != "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES" {
		t.Errorf("%s from %q, want XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", refenv.XDSMaxMessageBytes, from)
	}
}

// statsdFlags defines the --statsd-* flags on a flag set of its own.
func statsdFlags() (*flag.FlagSet, map[string]*string) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	vals := map[string]*string{}
	for _, name := range []string{"statsd-addr", "statsd-protocol", "statsd-format", "statsd-tags", "statsd-mogrifiers", "statsd-flush-interval"} {
		vals[name] = fs.String(name, "", "")
	}
	return fs, vals
}

// TestApplyStatsd: the reference's stats sinks map onto --statsd-*, as
// its runner chooses among them: nothing with DISABLE_STATS or
// USE_STATSD=false, DogStatsD over UDP, else statsd over TCP, which run
// as the reference is its default (run as ratelimit: cmd's tests).
func TestApplyStatsd(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
		want map[string]string
	}{
		{name: "USE_STATSD true by default", give: map[string]string{"STATSD_HOST": "statsd"}, want: map[string]string{
			"statsd-addr": "statsd:8125", "statsd-protocol": "tcp", "statsd-format": "statsd", "statsd-flush-interval": "10s"}},
		{name: "statsd_exporter beside it", give: map[string]string{"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": "9125",
			"STATS_FLUSH_INTERVAL": "1s", "EXTRA_TAGS": "cluster:eu,team:edge"}, want: map[string]string{
			"statsd-addr": "127.0.0.1:9125", "statsd-protocol": "tcp", "statsd-format": "statsd", "statsd-flush-interval": "1s",
			"statsd-tags": "cluster=eu,team=edge"}},
		{name: "off", give: map[string]string{"USE_STATSD": "false"}, want: map[string]string{"statsd-addr": ""}},
		{name: "disabled", give: map[string]string{"DISABLE_STATS": "true", "USE_DOG_STATSD": "true"}, want: map[string]string{"statsd-addr": ""}},
		{name: "dogstatsd", give: map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true", "STATSD_HOST": "dd-agent",
			"USE_DOG_STATSD_MOGRIFIERS":         "hits,domain",
			"DOG_STATSD_MOGRIFIER_HITS_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
			"DOG_STATSD_MOGRIFIER_HITS_NAME":    "ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS": "domain:$1,descriptor:$2",
			"DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN": `^some\.metric\.(.*)$`, "DOG_STATSD_MOGRIFIER_DOMAIN_NAME": "some.metric"},
			want: map[string]string{"statsd-addr": "dd-agent:8125", "statsd-protocol": "udp", "statsd-format": "dogstatsd",
				"statsd-mogrifiers": `[{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"descriptor":"$2","domain":"$1"}},` +
					`{"pattern":"^some\\.metric\\.(.*)$","name":"some.metric"}]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, vals := statsdFlags()
			a, err := refenv.Apply(fs, false, lookup(tt.give), nil)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				if got := *vals[name]; got != want {
					t.Errorf("--%s = %q, want %q", name, got, want)
				}
			}
			if len(a.Refused) != 0 {
				t.Errorf("refused %q", a.Refused)
			}
		})
	}
}

// TestApplyStatsdErrors: the reference's stats variables that it would
// refuse at start are errors naming the variable.
func TestApplyStatsdErrors(t *testing.T) {
	tests := []struct {
		give map[string]string
		want string
	}{
		{map[string]string{"USE_STATSD": "true", "EXTRA_TAGS": "cluster"}, `EXTRA_TAGS: want key:value entries, got "cluster"`},
		{map[string]string{"USE_STATSD": "true", "STATSD_PORT": "0"}, "STATSD_PORT: want a port from 1 to 65535, got 0"},
		{map[string]string{"USE_STATSD": "yes"}, `USE_STATSD: want true or false, got "yes"`},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "x", "DOG_STATSD_MOGRIFIER_X_PATTERN": "a"},
			"mogrifier x: needs DOG_STATSD_MOGRIFIER_X_PATTERN and DOG_STATSD_MOGRIFIER_X_NAME"},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "x", "DOG_STATSD_MOGRIFIER_X_PATTERN": "(", "DOG_STATSD_MOGRIFIER_X_NAME": "n"},
			"DOG_STATSD_MOGRIFIER_X_PATTERN: error parsing regexp"},
		{map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "x", "DOG_STATSD_MOGRIFIER_X_PATTERN": "a", "DOG_STATSD_MOGRIFIER_X_NAME": "n",
			"DOG_STATSD_MOGRIFIER_X_TAGS": "k:"}, `DOG_STATSD_MOGRIFIER_X_TAGS: want key:value entries, got "k:"`},
	}
	for _, tt := range tests {
		fs, _ := statsdFlags()
		_, err := refenv.Apply(fs, false, lookup(tt.give), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want it to say %s", tt.give, err, tt.want)
		}
	}
}
