package envlog_test

import (
	"flag"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
)

// TestLogShowsNoPassword: the start log names where a setting and a
// password came from, and shows a URL's password redacted and a
// password never.
func TestLogShowsNoPassword(t *testing.T) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.String("redis-url", "", "")
	fs.String("redis-username", "", "")
	env := map[string]string{"REDIS_URL": "redis://app:s3cret@redis:6379/0", "REDIS_AUTH": "app:s3cret"}
	e, err := refenv.Load(fs, flag.NewFlagSet("", flag.ContinueOnError), false, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	var pw, spw string
	e.Passwords(&pw, &spw, "", "")
	r := e.Report(nil)
	r.Refused = []string{"USE_STATSD: no statsd"}
	core, logs := observer.New(zapcore.InfoLevel)
	envlog.Log(zap.New(core), &r)
	var all strings.Builder
	for _, e := range logs.All() {
		all.WriteString(e.Message)
		for k, v := range e.ContextMap() {
			all.WriteString(" " + k + "=")
			all.WriteString(strings.ReplaceAll(strings.TrimSpace(strings.ReplaceAll(toString(v), "\n", " ")), "  ", " "))
		}
		all.WriteString("\n")
	}
	got := all.String()
	if strings.Contains(got, "s3cret") {
		t.Errorf("the log shows the password:\n%s", got)
	}
	for _, want := range []string{"redis://app:xxxxx@redis:6379/0", "from REDIS_AUTH", "REDIS_URL", "USE_STATSD"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks %q:\n%s", want, got)
		}
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case map[string]any:
		var b strings.Builder
		for k, x := range v {
			b.WriteString(k + ":" + toString(x) + " ")
		}
		return b.String()
	case []any:
		var b strings.Builder
		for _, x := range v {
			b.WriteString(toString(x) + " ")
		}
		return b.String()
	case string:
		return v
	default:
		return ""
	}
}

// TestLogLines: the start log's lines, as JSON: run as the reference,
// each setting with its value and source, the reference's settings not
// honoured in one warning, and the unknown RLS_ variables in another
// with the names they are near.
func TestLogLines(t *testing.T) {
	r := refenv.Report{
		RefMode: true,
		From:    map[string]string{"grpc-addr": "GRPC_PORT", "log-level": "RLS_LOG_LEVEL"},
		Value:   map[string]string{"grpc-addr": "0.0.0.0:9001", "log-level": "debug"},
		Refused: []string{"A: one", "B: two"}, UnknownRLS: []string{"RLS_CONFG"}, RLSHints: []string{"RLS_CONFG: RLS_CONFIG"},
		PasswordFrom: "REDIS_AUTH", SentinelPasswordFrom: "REDIS_SENTINEL_AUTH",
	}
	var out strings.Builder
	envlog.Log(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level",
		EncodeLevel: zapcore.LowercaseLevelEncoder}), zapcore.AddSync(&out), zapcore.InfoLevel)), &r)
	want := `{"level":"info","msg":"run as ratelimit: envoyproxy/ratelimit's defaults apply to settings not set"}
{"level":"info","msg":"settings from the environment","settings":{"grpc-addr":{"value":"0.0.0.0:9001","from":"GRPC_PORT"},"log-level":{"value":"debug","from":"RLS_LOG_LEVEL"},"redis password":"from REDIS_AUTH","redis sentinel password":"from REDIS_SENTINEL_AUTH"}}
{"level":"warn","msg":"envoyproxy/ratelimit settings not honoured","settings":["A: one","B: two"]}
{"level":"warn","msg":"RLS_ environment variables that no setting reads: misspelt?","variables":["RLS_CONFG"],"did_you_mean":["RLS_CONFG: RLS_CONFIG"]}
`
	if out.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", out.String(), want)
	}

	// Nothing from the environment: nothing logged.
	out.Reset()
	envlog.Log(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zapcore.EncoderConfig{MessageKey: "msg"}), zapcore.AddSync(&out), zapcore.InfoLevel)),
		&refenv.Report{})
	if out.Len() != 0 {
		t.Errorf("an empty report logs:\n%s", out.String())
	}
}
