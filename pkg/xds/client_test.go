package xds_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const node = "envoy-ratelimit"

// applied is one OnApply call.
type applied struct {
	status config.ReloadStatus
	err    error
}

// client is a running Client for a test.
type client struct {
	*xds.Client
	engine  *limits.Engine
	applied chan applied
	logs    *observer.ObservedLogs
	logged  chan struct{} // size 1: a nudge for awaitLog, which reads logs itself
}

// fast backs off briefly, so that tests of reconnects take little time.
func fast(o xds.Options) xds.Options {
	o.BackoffInitial, o.BackoffMax, o.BackoffJitter = 20*time.Millisecond, 100*time.Millisecond, 0
	return o
}

// startClient runs a Client for o until the test ends; before calls
// each of before on it before it starts.
func startClient(t *testing.T, o xds.Options, before ...func(*xds.Client)) *client {
	t.Helper()
	return startClientOn(t, memory.New(memory.Options{}), o, before...)
}

// startClientOn is startClient with an engine deciding on store.
func startClientOn(t *testing.T, store limits.Store, o xds.Options, before ...func(*xds.Client)) *client {
	t.Helper()
	if o.NodeID == "" {
		o.NodeID = node
	}
	c := &client{
		engine: limits.NewEngine(limits.NewRuleset(nil, nil, config.Checksum(nil)), store, limits.EngineOptions{}),
		// Room for every report of a test: none of them reports more.
		applied: make(chan applied, 64),
	}
	core, logs := observer.New(zap.DebugLevel)
	c.logs, c.logged = logs, make(chan struct{}, 1)
	log := zap.New(core, zap.Hooks(func(zapcore.Entry) error {
		select {
		case c.logged <- struct{}{}:
		default:
		}
		return nil
	}))
	o.OnApply = func(st config.ReloadStatus, err error) { c.applied <- applied{st, err} }
	var err error
	if c.Client, err = xds.New(c.engine, log, o); err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(c.Client)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(xdstest.Wait):
			t.Errorf("Watch did not return within %v of its context's end", xdstest.Wait)
		}
	})
	return c
}

// awaitApplied waits for the next OnApply report.
func (c *client) awaitApplied(t *testing.T) applied {
	t.Helper()
	select {
	case a := <-c.applied:
		return a
	case <-time.After(xdstest.Wait):
		t.Fatalf("no push applied or rejected within %v", xdstest.Wait)
		return applied{}
	}
}

// awaitReady waits for Ready.
func (c *client) awaitReady(t *testing.T) {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(xdstest.Wait):
		t.Fatalf("not ready within %v", xdstest.Wait)
	}
}

// awaitLog waits for n log entries with message msg whose error says
// want.
func (c *client) awaitLog(t *testing.T, n int, msg, want string) {
	t.Helper()
	deadline := time.NewTimer(xdstest.Wait)
	defer deadline.Stop()
	for {
		found := 0
		for _, e := range c.logs.FilterMessage(msg).All() {
			if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, want) {
				found++
			}
		}
		if found >= n {
			return
		}
		select {
		case <-c.logged:
		case <-deadline.C:
			t.Fatalf("%d logs %q with an error saying %q within %v, want %d; logs:\n%v", found, msg, want, xdstest.Wait, n, c.logs.All())
		}
	}
}

// decide decides one hit of user in domain edge.
func (c *client) decide(t *testing.T, user string) limits.Code {
	t.Helper()
	var d limits.Decision
	req := &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: user}}}}}
	if err := c.engine.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	return d.Code
}

func isACK(version string) func(xdstest.Request) bool {
	return func(r xdstest.Request) bool {
		return !r.NACK() && r.GetVersionInfo() == version && r.GetResponseNonce() != ""
	}
}

func isNACK(r xdstest.Request) bool { return r.NACK() }

// TestPushes: rules arrive and decide; the same rules again keep their
// counters; an update applies.
func TestPushes(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	c := startClient(t, fast(xds.Options{Server: srv.Addr}))
	c.awaitReady(t)
	if a := c.awaitApplied(t); a.err != nil || a.status.Successes != 1 || len(a.status.Files) != 1 || a.status.Files[0] != `RateLimitConfig "edge"` {
		t.Fatalf("first push: %+v", a)
	}
	_, n := srv.Await(t, 0, "ACKing version 1", isACK("1"))
	for i, want := range []limits.Code{limits.OK, limits.OK, limits.OverLimit} {
		if got := c.decide(t, "alice"); got != want {
			t.Fatalf("hit %d: %v, want %v", i+1, got, want)
		}
	}
	sum := c.engine.Rules().Checksum

	// The same rules under a new version: ACKed, nothing swapped, alice
	// still over her limit.
	srv.Set(t, node, "2", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	_, n = srv.Await(t, n, "ACKing version 2", isACK("2"))
	if got := c.engine.Rules().Checksum; got != sum {
		t.Errorf("rules swapped for equal ones: checksum %s, was %s", got, sum)
	}
	if got := c.decide(t, "alice"); got != limits.OverLimit {
		t.Errorf("alice after the same rules again: %v, want OVER_LIMIT (counters kept)", got)
	}

	srv.Set(t, node, "3", xdstest.RateLimitConfig("edge", "user", 10, rlsconf.RateLimitUnit_MINUTE))
	srv.Await(t, n, "ACKing version 3", isACK("3"))
	if a := c.awaitApplied(t); a.err != nil || a.status.Successes != 2 {
		t.Fatalf("update: %+v", a)
	}
	if got := c.decide(t, "alice"); got != limits.OK {
		t.Errorf("alice under the raised limit: %v, want OK", got)
	}
}

// TestBadPush: a bad push is NACKed with the resource, the path and the
// reason; the rules in use keep deciding, with their counters; a good
// push then ends the rejection.
func TestBadPush(t *testing.T) {
	tests := []struct {
		name string
		give []*rlsconf.RateLimitConfig
		want string
	}{
		{name: "invalid unit", give: []*rlsconf.RateLimitConfig{xdstest.RateLimitConfig("edge", "user", 5, 42)},
			want: `RateLimitConfig "edge": descriptors[0].rate_limit.unit: unknown unit "42" (want second, minute, hour, day, week, month or year)`},
		{name: "duplicate key", give: []*rlsconf.RateLimitConfig{edge(
			&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(rlsconf.RateLimitUnit_MINUTE, 5)},
			&rlsconf.RateLimitDescriptor{Key: "user", RateLimit: policy(rlsconf.RateLimitUnit_HOUR, 50)},
		)}, want: `RateLimitConfig "edge": descriptors[1]: duplicate descriptor key "user" value "" at this level (first at RateLimitConfig "edge")`},
		{name: "no resources", want: xds.ErrNoResources.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := xdstest.Start(t)
			srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
			c := startClient(t, fast(xds.Options{Server: srv.Addr}))
			c.awaitApplied(t)
			good := c.Status()
			for range 2 {
				c.decide(t, "alice")
			}

			srv.Set(t, node, "2", tt.give...)
			nack, n := srv.Await(t, 0, "NACKing version 2", isNACK)
			if got := nack.GetErrorDetail().GetMessage(); got != tt.want {
				t.Errorf("error_detail:\n%s\nwant\n%s", got, tt.want)
			}
			if v := nack.GetVersionInfo(); v != "1" {
				t.Errorf("NACK carries version %q, want the version in use, 1", v)
			}
			a := c.awaitApplied(t)
			if a.err == nil || a.err.Error() != tt.want || a.status.LastError == nil || a.status.Failures != 1 || a.status.Checksum != good.Checksum {
				t.Errorf("reported %+v, want the error, 1 failure and the rules in use", a)
			}
			if got := c.engine.Rules().Checksum; got != good.Checksum {
				t.Errorf("rules in use changed to %s", got)
			}
			if got := c.decide(t, "alice"); got != limits.OverLimit {
				t.Errorf("alice's third hit under the old rules: %v, want OVER_LIMIT", got)
			}

			// The old rules pushed again end the rejection.
			srv.Set(t, node, "3", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
			srv.Await(t, n, "ACKing version 3", isACK("3"))
			if a := c.awaitApplied(t); a.err != nil || a.status.LastError != nil || a.status.Successes != 2 || a.status.Failures != 1 {
				t.Errorf("after the good push: %+v", a)
			}
			if st := c.Status(); st.LastError != nil {
				t.Errorf("Status().LastError = %v after a good push", st.LastError)
			}
		})
	}
}

// TestRepeatedNACK: go-control-plane's snapshot cache answers a NACK with
// the same response at once. The client NACKs it again only after a
// backoff, and logs and reports the rejection once.
func TestRepeatedNACK(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 5, 42))
	o := fast(xds.Options{Server: srv.Addr})
	o.BackoffInitial, o.BackoffMax = 200*time.Millisecond, 200*time.Millisecond
	c := startClient(t, o)
	first, n := srv.Await(t, 0, "NACK", isNACK)
	var last xdstest.Request
	for range 3 {
		last, n = srv.Await(t, n+1, "NACK again", isNACK)
	}
	if gap := last.Received.Sub(first.Received); gap < 3*o.BackoffInitial {
		t.Errorf("4 NACKs of one push within %v; want a backoff of %v between each", gap, o.BackoffInitial)
	}
	if a := c.awaitApplied(t); a.err == nil {
		t.Fatalf("reported %+v, want a rejection", a)
	}
	select {
	case a := <-c.applied:
		t.Errorf("the same push reported again: %+v", a)
	default:
	}
	if got := c.logs.FilterMessage("xds push rejected; keeping the rules in use").Len(); got != 1 {
		t.Errorf("rejection logged %d times, want once", got)
	}
	select {
	case <-c.Ready():
		t.Errorf("ready without a good push")
	default:
	}
}

// TestEmptyPush: a push of no resources leaves no rules; it is refused
// unless AllowEmpty.
func TestEmptyPush(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, node, "1")
	c := startClient(t, fast(xds.Options{Server: srv.Addr, AllowEmpty: true}))
	srv.Await(t, 0, "ACKing the empty version 1", isACK("1"))
	c.awaitReady(t)
	if d := c.engine.Rules().Domains(); len(d) != 0 {
		t.Errorf("domains %q, want none", d)
	}

	// Rules, then none again: applied, and logged at Warn.
	srv.Set(t, node, "2", xdstest.RateLimitConfig("edge", "user", 1, rlsconf.RateLimitUnit_SECOND))
	c.awaitApplied(t)
	srv.Set(t, node, "3")
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("empty push with AllowEmpty: %v", a.err)
	}
	e := c.logs.FilterMessage("xds push applied without rules; every request gets OK").All()
	if len(e) != 1 || e[0].Level != zapcore.WarnLevel || fmt.Sprint(e[0].ContextMap()["dropped_domains"]) != "[edge]" {
		t.Errorf("logs of the empty push: %+v", e)
	}
}

// TestReady: without StartWithoutRules, Ready waits for the first good
// push; with it, it is closed before any.
func TestReady(t *testing.T) {
	srv := xdstest.Start(t)
	c := startClient(t, fast(xds.Options{Server: srv.Addr, StartWithoutRules: true}))
	c.awaitReady(t)

	c = startClient(t, fast(xds.Options{Server: srv.Addr, NodeID: "waiting"}))
	srv.Set(t, "waiting", "1", xdstest.RateLimitConfig("edge", "user", 5, 42))
	_, n := srv.Await(t, 0, "NACK", isNACK)
	select {
	case <-c.Ready():
		t.Fatal("ready after a rejected push")
	default:
	}
	srv.Set(t, "waiting", "2", xdstest.RateLimitConfig("edge", "user", 5, rlsconf.RateLimitUnit_SECOND))
	srv.Await(t, n, "ACK", isACK("2"))
	c.awaitReady(t)
}

// TestNode: the server sees the node ID and metadata, and the stream's
// headers.
func TestNode(t *testing.T) {
	srv := xdstest.Start(t)
	md, err := structpb.NewStruct(map[string]any{"cluster": "edge-gw"})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, fast(xds.Options{Server: srv.Addr, NodeMetadata: md, Headers: map[string]string{"x-token": "secret"}}))
	r, _ := srv.Await(t, 0, "opening the stream", func(xdstest.Request) bool { return true })
	if id := r.GetNode().GetId(); id != node {
		t.Errorf("node ID %q, want %q", id, node)
	}
	if v := r.GetNode().GetMetadata().GetFields()["cluster"].GetStringValue(); v != "edge-gw" {
		t.Errorf("node metadata %v, want cluster: edge-gw", r.GetNode().GetMetadata())
	}
	if got := r.Headers.Get("x-token"); len(got) != 1 || got[0] != "secret" {
		t.Errorf("header x-token: %q, want secret", got)
	}
	if got := r.GetTypeUrl(); got != "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig" {
		t.Errorf("type URL %q", got)
	}
}

// TestQuiet: a server with no snapshot for the node sends nothing; the
// client says so, naming the node ID.
func TestQuiet(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Set(t, "someone-else", "1", xdstest.RateLimitConfig("edge", "user", 5, rlsconf.RateLimitUnit_SECOND))
	c := startClient(t, fast(xds.Options{Server: srv.Addr}), func(c *xds.Client) { xds.SetQuietAfter(c, 50*time.Millisecond) })
	msg := "xds server has pushed nothing on this stream yet; check that it has a snapshot for the node ID"
	for {
		select {
		case <-c.logged:
		case <-time.After(xdstest.Wait):
			t.Fatalf("no warning within %v; logs: %v", xdstest.Wait, c.logs.All())
		}
		if e := c.logs.FilterMessage(msg).All(); len(e) > 0 {
			if id := e[0].ContextMap()["node_id"]; id != node {
				t.Errorf("warning names node %v, want %s", id, node)
			}
			return
		}
	}
}

// TestServerDown: a server that is down at start, or goes down, is
// retried with backoff; the rules in use keep deciding meanwhile, and a
// restarted control plane's rules apply, even under a version the client
// already saw.
func TestServerDown(t *testing.T) {
	srv := xdstest.Start(t)
	srv.Stop()
	c := startClient(t, fast(xds.Options{Server: srv.Addr}))
	c.awaitLog(t, 1, "xds stream ended; reconnecting", "connection refused")

	srv.Restart(t, false)
	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 1, rlsconf.RateLimitUnit_MINUTE))
	c.awaitReady(t)
	c.awaitApplied(t)
	if got := c.decide(t, "alice"); got != limits.OK {
		t.Fatalf("alice: %v", got)
	}

	n := len(c.logs.FilterMessage("xds stream ended; reconnecting").FilterFieldKey("error").All())
	srv.Stop()
	c.awaitLog(t, n+2, "xds stream ended; reconnecting", "")
	if got := c.decide(t, "alice"); got != limits.OverLimit {
		t.Errorf("alice's second hit while the server is down: %v, want OVER_LIMIT under the rules in use", got)
	}

	// A restarted control plane numbers its snapshots from 1 again.
	srv.Restart(t, true)
	srv.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 3, rlsconf.RateLimitUnit_MINUTE))
	if a := c.awaitApplied(t); a.err != nil || a.status.Successes != 2 {
		t.Fatalf("after the restart: %+v", a)
	}
	if got := c.decide(t, "alice"); got != limits.OK {
		t.Errorf("alice under the restarted server's limit of 3: %v, want OK", got)
	}
}

// TestTLS: TLS and mutual TLS, with certificates made here.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	other := certtest.NewCA(t, dir, "other-ca")
	serverPair, clientPair := ca.Issue(t, "server"), ca.Issue(t, "client")
	strangerPair := other.Issue(t, "stranger")
	tlsSrv := xdstest.Start(t, xdstest.WithTLS(ca.ServerConfig(t, serverPair, false)))
	mtlsSrv := xdstest.Start(t, xdstest.WithTLS(ca.ServerConfig(t, serverPair, true)))
	for _, s := range []*xdstest.Server{tlsSrv, mtlsSrv} {
		s.Set(t, node, "1", xdstest.RateLimitConfig("edge", "user", 5, rlsconf.RateLimitUnit_SECOND))
	}

	good := []struct {
		name string
		srv  *xdstest.Server
		tls  *xds.TLSOptions
	}{
		{name: "TLS", srv: tlsSrv, tls: &xds.TLSOptions{CAFile: ca.File}},
		{name: "TLS with a server name", srv: tlsSrv, tls: &xds.TLSOptions{CAFile: ca.File, ServerName: "localhost"}},
		{name: "mutual TLS", srv: mtlsSrv, tls: &xds.TLSOptions{CAFile: ca.File, CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			c := startClient(t, fast(xds.Options{Server: tt.srv.Addr, TLS: tt.tls}))
			c.awaitReady(t)
		})
	}

	bad := []struct {
		name string
		srv  *xdstest.Server
		tls  *xds.TLSOptions
		want string
	}{
		{name: "plaintext to TLS", srv: tlsSrv, want: "connection"},
		{name: "unknown CA", srv: tlsSrv, tls: &xds.TLSOptions{CAFile: other.File}, want: "certificate signed by unknown authority"},
		{name: "wrong server name", srv: tlsSrv, tls: &xds.TLSOptions{CAFile: ca.File, ServerName: "xds.example"}, want: "xds.example"},
		{name: "no client certificate", srv: mtlsSrv, tls: &xds.TLSOptions{CAFile: ca.File}, want: "certificate"},
		{name: "client certificate of another CA", srv: mtlsSrv, tls: &xds.TLSOptions{CAFile: ca.File, CertFile: strangerPair.CertFile, KeyFile: strangerPair.KeyFile}, want: "certificate"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.srv.Requests())
			c := startClient(t, fast(xds.Options{Server: tt.srv.Addr, TLS: tt.tls}))
			c.awaitLog(t, 1, "xds stream ended; reconnecting", tt.want)
			select {
			case <-c.Ready():
				t.Error("ready")
			default:
			}
			if n := len(tt.srv.Requests()); n != before {
				t.Errorf("the server got %d requests", n-before)
			}
		})
	}
}

// TestOptions: bad options are errors of New, not of the first connection.
func TestOptions(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	pair := ca.Issue(t, "client")
	engine := limits.NewEngine(limits.NewRuleset(nil, nil, ""), memory.New(memory.Options{}), limits.EngineOptions{})
	tests := []struct {
		name string
		give xds.Options
		want string
	}{
		{name: "no server", give: xds.Options{}, want: "xds server: required"},
		{name: "missing CA", give: xds.Options{Server: "127.0.0.1:1", TLS: &xds.TLSOptions{CAFile: filepath.Join(dir, "nope.pem")}}, want: "nope.pem: no such file"},
		{name: "CA not PEM", give: xds.Options{Server: "127.0.0.1:1", TLS: &xds.TLSOptions{CAFile: pair.KeyFile}}, want: "no PEM certificates"},
		{name: "cert without key", give: xds.Options{Server: "127.0.0.1:1", TLS: &xds.TLSOptions{CertFile: pair.CertFile}}, want: "must be set together"},
		{name: "key of another cert", give: xds.Options{Server: "127.0.0.1:1", TLS: &xds.TLSOptions{CertFile: pair.CertFile, KeyFile: ca.Issue(t, "other").KeyFile}}, want: "private key does not match"},
		{name: "backoff max below initial", give: xds.Options{Server: "127.0.0.1:1", BackoffInitial: time.Minute, BackoffMax: time.Second}, want: "shorter than the first"},
		{name: "jitter", give: xds.Options{Server: "127.0.0.1:1", BackoffJitter: 2}, want: "want 0 to 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := xds.New(engine, zap.NewNop(), tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestPushQuotaModeAndMetadata: a newer RateLimitConfig's quota_mode and
// metadata, unknown fields to go-control-plane's ratelimit module
// v0.1.0, are ACKed and reach the rules.
func TestPushQuotaModeAndMetadata(t *testing.T) {
	srv := xdstest.Start(t)
	cfg := xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE)
	withMetadata(withUnknown(cfg.Descriptors[0], 7, 1))
	srv.Set(t, node, "1", cfg)
	c := startClient(t, fast(xds.Options{Server: srv.Addr}))
	c.awaitReady(t)
	if a := c.awaitApplied(t); a.err != nil {
		t.Fatalf("push: %v", a.err)
	}
	srv.Await(t, 0, "ACKing version 1", isACK("1"))
	r := c.engine.Rules().Match("edge", []limits.Entry{{Key: "user", Value: "alice"}})
	if r == nil || !r.QuotaMode || r.Metadata["team"] != "payments" {
		t.Errorf("rule %+v, want quota_mode and metadata team: payments", r)
	}
}
