package refenv_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
)

// xdsFlags keeps of the flags set those of the rules over xDS.
func xdsFlags(set map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range set {
		if strings.HasPrefix(k, "xds-") || k == "config-type" || k == "allow-empty-rules" || k == "force-start-without-rules" {
			out[k] = v
		}
	}
	return out
}

// TestXDSMapping: the reference's CONFIG_TYPE, CONFIG_GRPC_XDS_*,
// XDS_CLIENT_* and FORCE_START_WITHOUT_INITIAL_CONFIG set the xDS flags
// and the xDS settings without a flag with the reference's meaning, and
// none is refused. pkg/xds parses what they set (SourceOptions.Validate).
func TestXDSMapping(t *testing.T) {
	xds := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
	on := map[string]string{"config-type": "xds", "allow-empty-rules": "true"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		refMode bool
		give    map[string]string
		want    map[string]string
	}{
		{name: "CONFIG_TYPE FILE", give: map[string]string{"CONFIG_TYPE": "FILE"}, want: map[string]string{}},
		// Envoy Gateway pushes no resource at all when the last
		// rate-limited route goes; the reference ACKs that.
		{name: "CONFIG_TYPE GRPC_XDS_SOTW allows empty pushes", give: xds, want: on},
		{name: "server, node", give: with(xds, "CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
			want: with(on, "xds-server", "envoy-gateway:18001", "xds-node-id", "envoy-ratelimit")},
		// As the reference splits it: at commas, then at the first '=',
		// nothing trimmed; an empty entry is skipped. A JSON object, which
		// --xds-node-metadata reads exactly.
		{name: "node metadata", give: with(xds, "CONFIG_GRPC_XDS_NODE_METADATA", "zone=eu-1,rule= a=b ,,{x=1"),
			want: with(on, "xds-node-metadata", `{"rule":" a=b ","zone":"eu-1","{x":"1"}`)},
		// As written: --xds-headers lower-cases the names.
		{name: "headers", give: with(xds, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "X-Token:abc,x-tenant:t1"),
			want: with(on, "xds-headers", "X-Token:abc,x-tenant:t1")},
		{name: "TLS as Envoy Gateway sets it", give: with(xds, "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
			want: with(on, "xds-tls", "true", "xds-tls-ca", "/certs/ca.crt", "xds-tls-cert", "/certs/tls.crt", "xds-tls-key", "/certs/tls.key",
				"xds-tls-server-name", "envoy-gateway")},
		// Without CONFIG_GRPC_XDS_SERVER_USE_TLS the reference dials in
		// plaintext and reads none of the files (any file would turn TLS
		// on in --xds-tls-*).
		{name: "TLS files without TLS", give: with(xds, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
			want: on},
		// The reference's default factor, 0.5, never grows a wait: every
		// one is the initial interval.
		{name: "backoff, factor below 1", give: with(xds, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "30s"),
			want: with(on, refenv.XDSBackoffInitial, "2s", refenv.XDSBackoffMax, "2s")},
		{name: "backoff, factor 2", give: with(xds, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "30s",
			"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
			want: with(on, refenv.XDSBackoffInitial, "2s", refenv.XDSBackoffMax, "30s")},
		// jpillora/backoff takes a factor of 0 or less as 2.
		{name: "backoff, factor 0", give: with(xds, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0"), want: on},
		// ... and an initial wait at or above the longest as the longest.
		{name: "backoff, initial above max", give: with(xds, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "90s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
			want: with(on, refenv.XDSBackoffInitial, "1m0s")},
		{name: "backoff without jitter", give: with(xds, "XDS_CLIENT_BACKOFF_JITTER", "false"),
			want: with(on, refenv.XDSBackoffMax, "10s", refenv.XDSBackoffJitter, "0")},
		{name: "max message size", give: with(xds, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "16777216"),
			want: with(on, refenv.XDSMaxMessageBytes, "16777216")},
		// envconfig skips an empty value: gRPC's default.
		{name: "max message size empty", give: with(xds, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", ""), want: on},
		{name: "force start", give: with(xds, "FORCE_START_WITHOUT_INITIAL_CONFIG", "true"), want: with(on, "force-start-without-rules", "true")},
		// With rule files the reference reads them at start whatever
		// FORCE_START_WITHOUT_INITIAL_CONFIG says, and so does the sidecar.
		{name: "force start with files", give: map[string]string{"CONFIG_TYPE": "FILE", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			want: map[string]string{}},
		// The reference's retry interceptor never retries (it is given no
		// retry count), so the interval changes nothing there either.
		{name: "connect retry interval", give: with(xds, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1s"), want: on},
		// Run as ratelimit, the reference's default factor applies.
		{name: "run as ratelimit", refMode: true, give: with(xds, "USE_STATSD", "false", "REDIS_URL", "r:6379"),
			want: with(on, refenv.XDSBackoffMax, "10s")},
		// A flag, or its RLS_ variable, comes first.
		{name: "RLS_ first", give: with(xds, "RLS_ALLOW_EMPTY_RULES", "false", "CONFIG_GRPC_XDS_SERVER_URL", "a:1", "RLS_XDS_SERVER", "b:2"),
			want: map[string]string{"config-type": "xds", "xds-server": "b:2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, got := mustStart(t, tt.refMode, tt.give)
			if diff := cmp.Diff(tt.want, xdsFlags(got)); diff != "" {
				t.Errorf("xDS flags set (-want +got):\n%s", diff)
			}
			if r := e.Report(environ(tt.give)); len(r.Refused) > 0 {
				t.Errorf("refused: %q", r.Refused)
			}
		})
	}
}

// TestXDSErrors: a value of the xDS variables the reference could not
// use stops the start, naming its variable, once.
func TestXDSErrors(t *testing.T) {
	tests := []struct {
		give map[string]string
		want string
	}{
		// The reference compares CONFIG_TYPE exactly.
		{map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"}, `CONFIG_TYPE: want FILE or GRPC_XDS_SOTW, got "grpc_xds_sotw"`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,rack"},
			`CONFIG_GRPC_XDS_NODE_METADATA: want key=value entries, got "rack"`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "yes"}, `CONFIG_GRPC_XDS_SERVER_USE_TLS: want true or false, got "yes"`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3"},
			`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: want a duration such as 10s or 1h30m, got "3"`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "fast"}, `XDS_CLIENT_BACKOFF_RANDOM_FACTOR: want a number, got "fast"`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "-1"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: want 0 or more bytes, got -1"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG": "y"}, `FORCE_START_WITHOUT_INITIAL_CONFIG: want true or false, got "y"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(slices.Sorted(maps.Keys(tt.give)), ","), func(t *testing.T) {
			_, _, _, err := start(t, false, tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if n := strings.Count(err.Error(), tt.want); n != 1 {
				t.Errorf("error %q names the problem %d times, want once", err, n)
			}
		})
	}

	// Headers that --xds-headers refuses (pkg/xds) name the variable.
	e, _ := mustStart(t, false, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token=abc"})
	err := e.Explain(errors.New(`--xds-headers: want name:value, got "x-token=abc"`))
	if want := `--xds-headers: want name:value, got "x-token=abc" (--xds-headers is set from CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)`; err.Error() != want {
		t.Errorf("Explain = %q, want %q", err, want)
	}
}
