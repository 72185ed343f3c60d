package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// xdsOpts starts a sidecar taking its rules from srv as node
// envoy-ratelimit, reconnecting quickly (the reference's
// XDS_CLIENT_BACKOFF_* alone set the waits), with the flags more.
func xdsOpts(srv *xdstest.Server, more ...string) sidecarOpts {
	env := map[string]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "100ms",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"}
	return sidecarOpts{env: env, args: append([]string{
		"--config-type", "xds", "--xds-server", srv.Addr, "--xds-node-id", "envoy-ratelimit",
	}, more...)}
}

// awaitHealth waits, at most xdstest.Wait, for the RLS service's health
// to be want.
func (s *sidecar) awaitHealth(t *testing.T, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Wait)
	defer cancel()
	w, err := s.health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("health never %v: %v", want, err)
		}
		if r.Status == want {
			return
		}
	}
}

// health reports the RLS service's health now.
func (s *sidecar) healthNow(t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func (s *sidecar) debugConfig(t *testing.T) admin.ConfigView {
	t.Helper()
	r, err := http.Get("http://" + s.adminAddr + "/debug/config")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var v admin.ConfigView
	if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (s *sidecar) code(t *testing.T, user string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := s.rls.ShouldRateLimit(context.Background(), userRequest(user, 1))
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

func isACK(version string) func(xdstest.Request) bool {
	return func(r xdstest.Request) bool {
		return !r.NACK() && r.GetVersionInfo() == version && r.GetResponseNonce() != ""
	}
}

// TestXDS: rules served by go-control-plane's xDS server and snapshot
// cache over mutual TLS, with certificates made here, arrive and decide;
// the sidecar is not ready before them; a bad push is NACKed while the
// old rules decide, with their counters; an update applies.
func TestXDS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	srv := xdstest.Start(t, xdstest.WithTLS(ca.ServerConfig(t, ca.Issue(t, "server"), true)))
	client := ca.Issue(t, "client")
	s := startSidecar(t, xdsOpts(srv, "--xds-tls-ca", ca.File, "--xds-tls-cert", client.CertFile, "--xds-tls-key", client.KeyFile))

	// No snapshot for the node yet: not ready.
	if st := s.healthNow(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before the first push: %v, want NOT_SERVING", st)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the first rules from the xDS server") {
		t.Errorf("/readyz before the first push: %d %s", code, body)
	}

	srv.Set(t, "envoy-ratelimit", "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	s.awaitHealth(t, healthpb.HealthCheckResponse_SERVING)
	_, n := srv.Await(t, 0, "ACKing version 1", isACK("1"))
	if code, body := s.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the first push: %d %s", code, body)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := s.code(t, "alice"); got != want {
			t.Fatalf("hit %d: %v, want %v", i+1, got, want)
		}
	}
	v := s.debugConfig(t)
	if len(v.Files) != 1 || v.Files[0] != `RateLimitConfig "edge"` || v.Domains["edge"].Descriptors[0].Source != `RateLimitConfig "edge": descriptors[0]` {
		t.Errorf("/debug/config: files %q, domains %+v", v.Files, v.Domains)
	}

	// A bad push: NACKed, reported, and the old rules keep deciding.
	srv.Set(t, "envoy-ratelimit", "2", xdstest.RateLimitConfig("edge", "user", 5, 42))
	nack, n := srv.Await(t, n, "NACKing version 2", func(r xdstest.Request) bool { return r.NACK() })
	want := `RateLimitConfig "edge": descriptors[0].rate_limit.unit: unknown unit "42"`
	if msg := nack.GetErrorDetail().GetMessage(); !strings.HasPrefix(msg, want) {
		t.Errorf("error_detail %q, want it to start %q", msg, want)
	}
	if got := s.code(t, "alice"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("alice after the bad push: %v, want OVER_LIMIT (old rules, counters kept)", got)
	}
	if v := s.debugConfig(t); !strings.HasPrefix(v.LastError, want) || v.Reloads["failure"] != 1 {
		t.Errorf("/debug/config after the bad push: last_error %q, reloads %v", v.LastError, v.Reloads)
	}
	if metricValue(t, s, "ratelimit_sidecar_config_last_reload_successful") != 0 {
		t.Errorf("/metrics after the bad push lacks config_last_reload_successful 0")
	}

	srv.Set(t, "envoy-ratelimit", "3", xdstest.RateLimitConfig("edge", "user", 10, rlsconf.RateLimitUnit_MINUTE))
	srv.Await(t, n, "ACKing version 3", isACK("3"))
	if got := s.code(t, "alice"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("alice under the raised limit: %v, want OK", got)
	}
	if v := s.debugConfig(t); v.LastError != "" || v.Reloads["success"] != 2 {
		t.Errorf("/debug/config after the good push: last_error %q, reloads %v", v.LastError, v.Reloads)
	}
	if metricValue(t, s, "ratelimit_sidecar_config_last_reload_successful") != 1 {
		t.Errorf("/metrics after the good push lacks config_last_reload_successful 1")
	}
}

// TestXDSFlags: bad xDS flags are errors at start (the cases:
// pkg/xds's TestSourceOptionsRefused), and the environment sets them as
// any flag.
func TestXDSFlags(t *testing.T) {
	if _, err := parseFlags([]string{"--xds-headers", "x-token=abc"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), `--xds-headers: want name:value, got "x-token=abc"`) {
		t.Errorf("--xds-headers x-token=abc: %v, want the headers refused", err)
	}

	env := map[string]string{
		"RLS_CONFIG_TYPE": "GRPC_XDS_SOTW", "RLS_XDS_SERVER": "envoy-gateway:18001", "RLS_XDS_TLS_CA": "/certs/ca.crt",
		"RLS_XDS_NODE_METADATA": "zone=a, rack = 7", "RLS_XDS_HEADERS": "X-Token:abc:def",
		"RLS_XDS_OVERLAY": "/etc/overlay/overlay.yaml",
	}
	c, err := parseFlags(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x := c.rules.xds
	if !x.Enabled || x.Server != "envoy-gateway:18001" || !x.TLS || x.NodeID != "default" {
		t.Errorf("from the environment: enabled %v, server %q, tls %v, node ID %q", x.Enabled, x.Server, x.TLS, x.NodeID)
	}
	if f := x.Options.NodeMetadata.GetFields(); len(f) != 2 || f["zone"].GetStringValue() != "a" || f["rack"].GetStringValue() != "7" {
		t.Errorf("node metadata %v", x.Options.NodeMetadata)
	}
	if len(x.Options.Headers) != 1 || x.Options.Headers["x-token"] != "abc:def" {
		t.Errorf("headers %v", x.Options.Headers)
	}
	if x.OverlayPath != "/etc/overlay/overlay.yaml" {
		t.Errorf("overlay %q, want RLS_XDS_OVERLAY's", x.OverlayPath)
	}

	err = run(context.Background(), []string{"--config-type", "xds", "--xds-tls-ca", "/nonexistent/ca.pem", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard, io.Discard)
	if want := "--config-type xds: xds TLS CA: open /nonexistent/ca.pem: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("run with a missing CA: %v, want %s", err, want)
	}
}
