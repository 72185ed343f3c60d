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
		"PORT": "9090", "LOG_LEVEL": "Warning", "GRPC_PORT": "7000", "USE_STATSD": "true",
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
	if len(a.Refused) != 1 || !strings.HasPrefix(a.Refused[0], "USE_STATSD: ") {
		t.Errorf("refused %q, want USE_STATSD alone", a.Refused)
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
