package redis_test

import (
	"cmp"
	"context"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// refusals records the OnConfigError calls of a Lazy store.
type refusals struct {
	mu     sync.Mutex
	events []refusal
}

type refusal struct {
	redis.ConfigError
	cleared bool
}

func (r refusal) String() string {
	if r.cleared {
		return "cleared " + r.ConfigError.Error()
	}
	return r.ConfigError.Error()
}

func (r *refusals) on(e *redis.ConfigError, cleared bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, refusal{*e, cleared})
}

func (r *refusals) get() []refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// started returns the refusals that started or changed.
func (r *refusals) started() []refusal {
	var out []refusal
	for _, e := range r.get() {
		if !e.cleared {
			out = append(out, e)
		}
	}
	return out
}

// connectLazy connects a Lazy store for o, retrying often, that reports
// refusals to r. It is closed at cleanup.
func connectLazy(t *testing.T, o redis.Options, r *refusals) *redis.Lazy {
	t.Helper()
	o.KeyPrefix = newPrefix(t)
	o.Timeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := redis.Connect(ctx, o, redis.LazyOptions{Wait: 2 * time.Second, Retry: 200 * time.Millisecond, OnConfigError: r.on})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// drive has l use Redis, as requests and readiness probes do, until
// cond holds, for at most 15 s, and fails the test otherwise.
func drive(t *testing.T, l *redis.Lazy, r *refusals, what string, cond func() bool) {
	t.Helper()
	lim := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	for range 750 {
		if cond() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("k", lim, 1)}})
		_ = l.Probe(ctx)
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within 15s; refusals so far: %v; lasting: %v", what, r.get(), l.ConfigErrors())
}

// refusedBy reports whether r has seen a refusal start at every one
// of addrs.
func refusedBy(r *refusals, addrs ...string) func() bool {
	return func() bool {
		for _, a := range addrs {
			if !slices.ContainsFunc(r.started(), func(e refusal) bool { return e.Addr == a }) {
				return false
			}
		}
		return true
	}
}

// checkRefusals checks that r saw, at each of addrs, one refusal start
// as want says (kind, role, message) and, if cleared, end.
func checkRefusals(t *testing.T, r *refusals, want redis.ConfigError, cleared bool, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		w := want
		w.Addr = a
		var got []refusal
		for _, e := range r.get() {
			if e.Addr == a {
				got = append(got, e)
			}
		}
		n := 1
		if cleared {
			n = 2
		}
		if len(got) != n || got[0].ConfigError != w || cleared && (!got[1].cleared || got[1].ConfigError != w) {
			t.Errorf("refusals at %s: %v; want %q once%s", a, got, w.Error(), map[bool]string{true: ", then cleared once"}[cleared])
		}
	}
}

// TestConfigErrorsStandalone: a standalone Redis that refuses the
// password, or the ACL user's commands or keys, is reported once as it
// starts refusing, with Redis's message and its address, however often
// the store tries meanwhile, and once as it stops, once fixed on the
// live server.
func TestConfigErrorsStandalone(t *testing.T) {
	all := []string{"on", ">right", "~*", "&*", "+@all"}
	tests := []struct {
		name      string
		user      []string // the ACL user "app"'s rules
		password  string   // the store's; "" for the default user, without one
		noDefault bool     // the default user needs a password
		fix       []string // rules for app ("default" if noDefault) that fix it
		want      redis.ConfigError
	}{
		{
			name: "wrong password", user: all, password: "wrong", fix: []string{">wrong"},
			want: redis.ConfigError{Kind: redis.KindAuth, Role: redis.RoleServer, Msg: "WRONGPASS invalid username-password pair or user is disabled."},
		},
		{
			name: "no password", noDefault: true, fix: []string{"nopass"},
			want: redis.ConfigError{Kind: redis.KindAuth, Role: redis.RoleServer, Msg: "NOAUTH Authentication required."},
		},
		{
			name: "no evalsha", user: append(slices.Clone(all), "-evalsha", "-eval"), password: "right", fix: []string{"+evalsha", "+eval"},
			want: redis.ConfigError{Kind: redis.KindACL, Role: redis.RoleServer, Msg: "NOPERM this user has no permissions to run the 'evalsha' command"},
		},
		{
			name: "no script load", user: append(slices.Clone(all), "-script|load"), password: "right", fix: []string{"+script|load"},
			want: redis.ConfigError{Kind: redis.KindACL, Role: redis.RoleServer, Msg: "NOPERM this user has no permissions to run the 'script|load' command"},
		},
		{
			name: "keys of another prefix", user: []string{"on", ">right", "~other:*", "+@all"}, password: "right", fix: []string{"~*"},
			want: redis.ConfigError{Kind: redis.KindACL, Role: redis.RoleServer, Msg: "NOPERM this user has no permissions to access one of the keys used as arguments"},
		},
		{
			// Refused inside the scripts, which read TIME: the probe has to
			// be refused too, or it would end the refusal that requests
			// keep meeting.
			name: "no time", user: append(slices.Clone(all), "-time"), password: "right", fix: []string{"+time"},
			want: redis.ConfigError{Kind: redis.KindACL, Role: redis.RoleServer, Msg: "ERR The user executing the script can't run this command or subcommand"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			admin := srv.Client(t) // stays authenticated as default
			o := redis.Options{URL: "redis://" + srv.Addr}
			fixUser := "app"
			if tt.noDefault {
				aclSetUser(t, admin, "default", "resetpass", ">right")
				fixUser = "default"
			} else {
				aclSetUser(t, admin, "app", tt.user...)
				o.Username, o.Password = "app", tt.password
			}
			var r refusals
			l := connectLazy(t, o, &r)
			drive(t, l, &r, "refusal reported", refusedBy(&r, srv.Addr))
			// Go on failing for a while: still one report.
			refused := redisErrors(t, admin)
			drive(t, l, &r, "refused three more times", func() bool { return redisErrors(t, admin) >= refused+3 })
			if got := l.ConfigErrors(); len(got) != 1 || got[0].Addr != srv.Addr || got[0].Kind != tt.want.Kind {
				t.Errorf("ConfigErrors() = %v, want one %s refusal at %s", got, tt.want.Kind, srv.Addr)
			}
			if !l.ConfigErrorActive(tt.want.Kind) || l.ConfigErrorsTotal(tt.want.Kind) != 1 {
				t.Errorf("ConfigErrorActive(%s) = %v, ConfigErrorsTotal = %d; want true, 1", tt.want.Kind, l.ConfigErrorActive(tt.want.Kind), l.ConfigErrorsTotal(tt.want.Kind))
			}

			aclSetUser(t, admin, fixUser, tt.fix...)
			drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
			checkRefusals(t, &r, tt.want, true, srv.Addr)
			if l.ConfigErrorActive(tt.want.Kind) || l.ConfigErrorsTotal(tt.want.Kind) != 1 {
				t.Errorf("after the fix: ConfigErrorActive(%s) = %v, ConfigErrorsTotal = %d; want false, 1", tt.want.Kind, l.ConfigErrorActive(tt.want.Kind), l.ConfigErrorsTotal(tt.want.Kind))
			}
			b := &limits.Batch{Checks: []limits.Check{check("k", mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0), 1)}}
			if err := l.Apply(context.Background(), b); err != nil {
				t.Errorf("Apply after the fix: %v", err)
			}
		})
	}
}

// redisErrors returns the number of error replies Redis has sent
// (INFO errorstats), refusals included.
func redisErrors(t *testing.T, c *goredis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		if _, v, ok := strings.Cut(strings.TrimSpace(line), ":count="); ok {
			c, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO errorstats: %q", line)
			}
			n += c
		}
	}
	return n
}

// TestConfigErrorsTLS: a TLS handshake that fails for the configuration
// is reported once with the TLS error and the address; a Redis that
// stops requiring client certificates ends the refusal. TLS spoken to a
// plain-text port, and plain text to a TLS port, are reported too,
// although they fail as a timeout and a closed connection do.
func TestConfigErrorsTLS(t *testing.T) {
	dir, tlsPort, args := tlsFiles(t, "yes")
	good := redis.TLSOptions{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"),
		KeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	tests := []struct {
		name  string
		host  string
		plain bool   // to the plain-text port, not the TLS one
		url   string // the URL's scheme; "rediss" if empty
		tls   redis.TLSOptions
		want  string // in the message
		fix   []any  // a CONFIG SET that fixes it; nil if none does
	}{
		{name: "unknown authority", host: "127.0.0.1", tls: redis.TLSOptions{CAFile: filepath.Join(dir, "other-ca.pem"), CertFile: good.CertFile, KeyFile: good.KeyFile},
			want: "tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{name: "wrong host name", host: "localhost", tls: good, want: "x509: certificate is not valid for any names, but wanted to match localhost"},
		{name: "no client certificate", host: "127.0.0.1", tls: redis.TLSOptions{CAFile: good.CAFile},
			want: "remote error: tls: certificate required", fix: []any{"CONFIG", "SET", "tls-auth-clients", "no"}},
		{name: "TLS to the plain-text port", host: "127.0.0.1", plain: true, tls: good, want: "plain text"},
		{name: "plain text to the TLS port", host: "127.0.0.1", url: "redis", want: "speaks TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t, redistest.WithArgs(args...))
			addr := net.JoinHostPort(tt.host, strconv.Itoa(tlsPort))
			if tt.plain {
				addr = srv.Addr
			}
			scheme := cmp.Or(tt.url, "rediss")
			var r refusals
			l := connectLazy(t, redis.Options{URL: scheme + "://" + addr, TLS: tt.tls}, &r)
			drive(t, l, &r, "refusal reported", refusedBy(&r, addr))
			drive(t, l, &r, "five more attempts", countdown(5))
			got := r.get()
			if len(got) != 1 || got[0].Kind != redis.KindTLS || got[0].Role != redis.RoleServer || !strings.Contains(got[0].Msg, tt.want) {
				t.Fatalf("refusals %v; want one TLS refusal by %s saying %q", got, addr, tt.want)
			}
			if tt.fix == nil {
				return
			}
			if err := srv.Client(t).Do(context.Background(), tt.fix...).Err(); err != nil {
				t.Fatal(err)
			}
			drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
			checkRefusals(t, &r, got[0].ConfigError, true, addr)
		})
	}
}

// countdown returns a condition that holds on its n+1st call.
func countdown(n int) func() bool {
	return func() bool {
		n--
		return n < 0
	}
}

// TestNoConfigErrorForOutage: a Redis that is down is an outage, not a
// configuration error.
func TestNoConfigErrorForOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill()
	var r refusals
	l := connectLazy(t, redis.Options{URL: "redis://" + srv.Addr}, &r)
	drive(t, l, &r, "ten attempts", countdown(10))
	srv.Restart(t)
	drive(t, l, &r, "connected", l.Connected)
	if got := r.get(); len(got) != 0 || len(l.ConfigErrors()) != 0 {
		t.Errorf("refusals %v, lasting %v; want none", got, l.ConfigErrors())
	}
}

// TestConfigErrorsSentinel: the sentinels refusing their password, the
// master refusing its own, and the master's ACL refusing a command are
// each reported once, naming the sentinel or the master, and end once
// fixed.
func TestConfigErrorsSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	sentinel := sn.Sentinels[0].Client(t)
	master, replica := sn.Master.Client(t), sn.Replica.Client(t)
	opts := redis.Options{SentinelMaster: sn.MasterName, SentinelAddrs: sn.SentinelAddrs}

	t.Run("sentinel password", func(t *testing.T) {
		aclSetUser(t, sentinel, "default", "resetpass", ">sentinel-right")
		t.Cleanup(func() { aclSetUser(t, sentinel, "default", "nopass") })
		o := opts
		o.SentinelPassword = "sentinel-wrong"
		var r refusals
		l := connectLazy(t, o, &r)
		drive(t, l, &r, "refusal reported", refusedBy(&r, sn.SentinelAddrs...))
		drive(t, l, &r, "five more attempts", countdown(5))
		aclSetUser(t, sentinel, "default", ">sentinel-wrong")
		drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
		checkRefusals(t, &r, redis.ConfigError{Kind: redis.KindAuth, Role: redis.RoleSentinel, Msg: "WRONGPASS invalid username-password pair or user is disabled."}, true, sn.SentinelAddrs...)
	})
	t.Run("master password", func(t *testing.T) {
		for _, c := range []*goredis.Client{master, replica} {
			aclSetUser(t, c, "app", "on", ">right", "~*", "&*", "+@all")
		}
		o := opts
		o.Username, o.Password = "app", "wrong"
		var r refusals
		l := connectLazy(t, o, &r)
		drive(t, l, &r, "refusal reported", refusedBy(&r, sn.Master.Addr))
		drive(t, l, &r, "five more attempts", countdown(5))
		for _, c := range []*goredis.Client{master, replica} {
			aclSetUser(t, c, "app", ">wrong")
		}
		drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
		checkRefusals(t, &r, redis.ConfigError{Kind: redis.KindAuth, Role: redis.RoleMaster, Msg: "WRONGPASS invalid username-password pair or user is disabled."}, true, sn.Master.Addr)
	})
	t.Run("master ACL", func(t *testing.T) {
		for _, c := range []*goredis.Client{master, replica} {
			aclSetUser(t, c, "app2", "on", ">right", "~*", "&*", "+@all", "-evalsha")
		}
		o := opts
		o.Username, o.Password = "app2", "right"
		var r refusals
		l := connectLazy(t, o, &r)
		drive(t, l, &r, "refusal reported", refusedBy(&r, sn.Master.Addr))
		drive(t, l, &r, "five more attempts", countdown(5))
		for _, c := range []*goredis.Client{master, replica} {
			aclSetUser(t, c, "app2", "+evalsha")
		}
		drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 })
		checkRefusals(t, &r, redis.ConfigError{Kind: redis.KindACL, Role: redis.RoleMaster, Msg: "NOPERM this user has no permissions to run the 'evalsha' command"}, true, sn.Master.Addr)
	})
}

// TestConfigErrorsCluster: a password every node refuses is reported
// once per node; one master refusing it, once, naming that master; each
// ends once fixed.
func TestConfigErrorsCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	nodes := make([]*goredis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		nodes[i] = n.Client(t)
		aclSetUser(t, nodes[i], "app", "on", ">right", "~*", "&*", "+@all")
	}
	wrongPass := redis.ConfigError{Kind: redis.KindAuth, Role: redis.RoleNode, Msg: "WRONGPASS invalid username-password pair or user is disabled."}

	t.Run("every node", func(t *testing.T) {
		var r refusals
		l := connectLazy(t, redis.Options{ClusterAddrs: c.Addrs, Username: "app", Password: "wrong"}, &r)
		drive(t, l, &r, "refusal reported", refusedBy(&r, c.Addrs...))
		drive(t, l, &r, "five more attempts", countdown(5))
		for _, n := range nodes {
			aclSetUser(t, n, "app", ">wrong")
		}
		drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
		checkRefusals(t, &r, wrongPass, true, c.Addrs...)
	})
	t.Run("one master", func(t *testing.T) {
		aclSetUser(t, nodes[1], "app", "resetpass", ">other")
		var r refusals
		l := connectLazy(t, redis.Options{ClusterAddrs: c.Addrs, Username: "app", Password: "wrong"}, &r)
		drive(t, l, &r, "refusal reported", refusedBy(&r, c.Addrs[1]))
		drive(t, l, &r, "five more attempts", countdown(5))
		if got := r.get(); len(got) != 1 {
			t.Errorf("refusals %v; want one, by %s", got, c.Addrs[1])
		}
		aclSetUser(t, nodes[1], "app", ">wrong")
		drive(t, l, &r, "refusal cleared", func() bool { return len(l.ConfigErrors()) == 0 && l.Connected() })
		checkRefusals(t, &r, wrongPass, true, c.Addrs[1])
	})
}
