package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults for Options.
const (
	// DefaultTimeout fits Envoy's default rate-limit timeout of 20 ms with
	// room for the gRPC round trip.
	DefaultTimeout = 15 * time.Millisecond
	// DefaultKeyPrefix starts every key the store writes.
	DefaultKeyPrefix = "rls:"
	// DefaultMaxInflight is Options.MaxInflight's default: one round trip
	// at a time, so that a busy sidecar sends Redis fewer, larger batches.
	DefaultMaxInflight = 1
)

// backstopTimeout bounds socket reads and writes that carry no request
// deadline, such as loading the scripts and go-redis's own topology
// discovery. Request paths always carry Options.Timeout as a deadline.
const backstopTimeout = time.Second

// dialAttempts is how often go-redis tries to dial before it fails the
// requests waiting for the connection. Its default of five, 100 ms apart,
// would make every request wait its whole timeout while Redis refuses
// connections; the next request dials again anyway.
const dialAttempts = 1

// noRetries turns off go-redis's command retries on standalone and
// Sentinel (a Cluster client retries only MOVED, ASK and the like, within
// MaxRedirects). A retried script that had already run would consume its
// hits twice, the backoff eats the request's few milliseconds, and the
// pool already drops connections that died while idle.
const noRetries = -1

// onePool turns off go-redis's separate pool for pipelines (a Cluster
// client has none unless asked), so that a batch and a call sent alone
// take connections from one pool, which the store opens ahead of need
// when Redis is far away (see warm).
const onePool = -1

// Options says how to reach Redis. Exactly one of URL, SentinelMaster and
// ClusterAddrs must be set. The zero values of the other fields mean the
// defaults documented on each.
type Options struct {
	// URL of a standalone Redis: redis://[user:password@]host:port[/db],
	// or rediss:// for TLS. Query parameters are those of go-redis's
	// ParseURL.
	URL string

	// SentinelMaster is the name of the master that the sentinels at
	// SentinelAddrs ("host:port") monitor.
	SentinelMaster string
	SentinelAddrs  []string

	// ClusterAddrs are seed nodes ("host:port") of a Redis Cluster.
	ClusterAddrs []string

	// Username and Password authenticate to Redis (not to the sentinels).
	// When set they override those in URL.
	Username string
	Password string

	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// for sentinels that require it (requirepass or ACL users).
	SentinelUsername string
	SentinelPassword string

	// Credentials, if set, gives the user name and password of every new
	// connection to Redis (not to the sentinels), in place of Username,
	// Password and those in URL: for credentials that change while the
	// sidecar runs (a rotated secret file, a cloud IAM token). Connections
	// already open keep the credentials they were opened with.
	Credentials Credentials
	// SentinelCredentials is Credentials for the sentinels.
	SentinelCredentials Credentials

	// ConnMaxLifetime closes a connection once it is this old, when it is
	// next taken from the pool, so that no connection outlives the
	// credentials it was opened with by more than this (AWS closes
	// IAM-authenticated connections after 12 hours). Each connection's
	// lifetime is shortened by up to a tenth, at random, so that the pool
	// does not reconnect all at once. 0 means connections live until they
	// fail.
	ConnMaxLifetime time.Duration

	// TLS configures TLS. It is used with a rediss:// URL, or when
	// TLS.Enabled is set.
	TLS TLSOptions

	// PoolSize is the number of connections per Redis node; 0 means
	// go-redis's default of 10 per GOMAXPROCS.
	PoolSize int

	// MaxInflight is the number of request round trips the store has
	// under way at once (on a Cluster, to each master) before requests
	// wait to go together. Requests made while that many are out wait
	// for the next round trip to end and go together in it, so a busy
	// sidecar makes fewer, larger writes and Redis runs fewer scripts.
	// When the round-trip time is a millisecond or more, the store adds
	// round trips beyond it, up to 16 (or the pool size), so that a
	// request waits a sixteenth of a round-trip time at most instead of
	// a whole one (see docs/slow-redis.md). More in flight lets a
	// request that comes while one is out go at once on a nearby Redis
	// too, for more Redis CPU. 0 means DefaultMaxInflight.
	MaxInflight int

	// Timeout bounds each Redis operation; a request's own deadline bounds
	// it further. 0 means DefaultTimeout.
	Timeout time.Duration

	// KeyPrefix starts every key, so several deployments can share a
	// Redis. It must not contain '{' or '}', which would change the hash
	// slot of the keys. "" means DefaultKeyPrefix.
	KeyPrefix string

	// Now, if set, makes the store decide by this clock instead of by
	// Redis's TIME. It is for tests only, so that the shared case table
	// can control time: production must use Redis's clock, which every
	// sidecar shares. Keys still expire in Redis's time.
	Now func() time.Time

	// watch, if set, follows the configuration errors of the clients
	// that client builds (see watch.go). Connect sets it.
	watch *watch
}

// TLSOptions configures TLS to Redis. Files hold PEM.
type TLSOptions struct {
	// Enabled turns TLS on for sentinel and cluster addresses and for
	// redis:// URLs. A rediss:// URL turns it on by itself.
	Enabled bool
	// CAFile holds the CAs that Redis's certificate must chain to; empty
	// means the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for
	// Redis servers that require one (tls-auth-clients).
	CertFile string
	KeyFile  string
	// SkipHostnameVerification checks that Redis's certificate chains to
	// the CAs, but not that it names the host dialled: for Redis nodes
	// reached by addresses their certificates do not list (as
	// envoyproxy/ratelimit's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool
}

// Configured reports whether o names any Redis: a URL, a sentinel master
// or addresses, or cluster addresses. It is how the sidecar decides
// between Redis and its memory store; Validate then checks that what is
// named is complete.
func (o *Options) Configured() bool {
	return o.URL != "" || o.SentinelMaster != "" || len(o.SentinelAddrs) > 0 || len(o.ClusterAddrs) > 0
}

// Validate reports every problem with o.
func (o *Options) Validate() error {
	var errs []error
	n := 0
	if o.URL != "" {
		n++
	}
	if o.SentinelMaster != "" || len(o.SentinelAddrs) > 0 {
		n++
		if o.SentinelMaster == "" {
			errs = append(errs, errors.New("sentinel addresses without a master name"))
		}
		if len(o.SentinelAddrs) == 0 {
			errs = append(errs, errors.New("sentinel master name without sentinel addresses"))
		}
	}
	if len(o.ClusterAddrs) > 0 {
		n++
	}
	switch n {
	case 0:
		errs = append(errs, errors.New("no Redis configured: set a URL, a sentinel master and addresses, or cluster addresses"))
	case 1:
	default:
		errs = append(errs, errors.New("more than one of URL, sentinel and cluster configured"))
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf("key prefix %q contains '{' or '}'", o.KeyPrefix))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("negative timeout %v", o.Timeout))
	}
	if o.PoolSize < 0 {
		errs = append(errs, fmt.Errorf("negative pool size %d", o.PoolSize))
	}
	if o.ConnMaxLifetime < 0 {
		errs = append(errs, fmt.Errorf("negative connection lifetime %v", o.ConnMaxLifetime))
	}
	if o.MaxInflight < 0 {
		errs = append(errs, fmt.Errorf("negative max in flight %d", o.MaxInflight))
	}
	if (o.TLS.CertFile == "") != (o.TLS.KeyFile == "") {
		errs = append(errs, errors.New("TLS client certificate and key must be set together"))
	}
	tlsFiles := o.TLS.CAFile != "" || o.TLS.CertFile != ""
	if tlsFiles && !o.TLS.Enabled && !strings.HasPrefix(o.URL, "rediss://") {
		errs = append(errs, errors.New("TLS files set but TLS is off: use a rediss:// URL or enable TLS"))
	}
	return errors.Join(errs...)
}

// timeout returns the per-operation timeout.
func (o *Options) timeout() time.Duration {
	if o.Timeout == 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

func (o *Options) maxInflight() int {
	if o.MaxInflight == 0 {
		return DefaultMaxInflight
	}
	return o.MaxInflight
}

// prefix returns the key prefix.
func (o *Options) prefix() string {
	if o.KeyPrefix == "" {
		return DefaultKeyPrefix
	}
	return o.KeyPrefix
}

// tlsConfig returns the TLS configuration to use, starting from base (set
// by a rediss:// URL), or nil for none.
func (o *Options) tlsConfig(base *tls.Config) (*tls.Config, error) {
	if base == nil && !o.TLS.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	}
	if o.TLS.CAFile != "" {
		pem, err := os.ReadFile(o.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s: no PEM certificates", o.TLS.CAFile)
		}
		cfg.RootCAs = pool
	}
	if o.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLS.CertFile, o.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.TLS.SkipHostnameVerification {
		skipHostname(cfg)
	}
	return cfg, nil
}

// skipHostname makes cfg verify the peer's chain against its RootCAs (nil:
// the system's) without checking the host name: crypto/tls can only skip
// all of verification, so the chain is verified here instead.
func skipHostname(cfg *tls.Config) {
	roots := cfg.RootCAs
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: Redis sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// client builds the go-redis client that o describes. It does not connect.
func (o *Options) client() (goredis.UniversalClient, error) {
	switch {
	case o.URL != "":
		return o.urlClient()
	case len(o.ClusterAddrs) > 0:
		return o.clusterClient()
	default:
		return o.sentinelClient()
	}
}

// share sets on opts what every client of the store shares: its
// timeouts, no retries (a command that may have run is never sent
// again), no maintenance notifications (a Redis Enterprise feature; on
// auto they only add a command to every new connection) and one pool.
func (o *Options) share(opts *goredis.Options) {
	timeout := max(o.timeout(), backstopTimeout)
	opts.PoolSize = o.PoolSize
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	// Request contexts carry their deadline but may not close at it (see
	// deadlineCtx): bound a wait for a pooled connection alike.
	opts.PoolTimeout = o.timeout()
	opts.ContextTimeoutEnabled = true
	opts.DialerRetries = dialAttempts
	opts.MaxRetries = noRetries
	opts.PipelinePoolSize = onePool
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opts.ConnMaxLifetime = o.ConnMaxLifetime
	opts.ConnMaxLifetimeJitter = o.ConnMaxLifetime / 10
}

// base returns the shared options with the credentials given: creds,
// when not nil, over username and password.
func (o *Options) base(username, password string, creds Credentials, tls *tls.Config) goredis.Options {
	opts := goredis.Options{Username: username, Password: password, TLSConfig: tls}
	if creds != nil {
		opts.CredentialsProviderContext = creds.Credentials
	}
	o.share(&opts)
	return opts
}

// urlClient is the client of a standalone Redis named by o.URL: the
// URL's options, with the store's shared ones over them.
func (o *Options) urlClient() (goredis.UniversalClient, error) {
	ro, err := goredis.ParseURL(o.URL)
	if err != nil {
		// The URL may hold a password: do not repeat it.
		return nil, errors.New("invalid Redis URL: " + redactURLError(err))
	}
	if ro.TLSConfig, err = o.tlsConfig(ro.TLSConfig); err != nil {
		return nil, err
	}
	if o.Username != "" {
		ro.Username = o.Username
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	if o.Credentials != nil {
		ro.CredentialsProviderContext = o.Credentials.Credentials
	}
	o.share(ro)
	rdb := newClient(ro)
	if o.watch != nil {
		rdb.AddHook(o.watch.hook(RoleServer, ro.Addr, ro.TLSConfig != nil))
	}
	return rdb, nil
}

// clusterClient is the client of the Redis Cluster of o.ClusterAddrs.
func (o *Options) clusterClient() (goredis.UniversalClient, error) {
	cfg, err := o.tlsConfig(nil)
	if err != nil {
		return nil, err
	}
	b := o.base(o.Username, o.Password, o.Credentials, cfg)
	co := &goredis.ClusterOptions{
		Addrs:                      o.ClusterAddrs,
		Username:                   b.Username,
		Password:                   b.Password,
		CredentialsProviderContext: b.CredentialsProviderContext,
		ConnMaxLifetime:            b.ConnMaxLifetime,
		ConnMaxLifetimeJitter:      b.ConnMaxLifetimeJitter,
		TLSConfig:                  b.TLSConfig,
		PoolSize:                   b.PoolSize,
		ReadTimeout:                b.ReadTimeout,
		WriteTimeout:               b.WriteTimeout,
		PoolTimeout:                b.PoolTimeout,
		ContextTimeoutEnabled:      b.ContextTimeoutEnabled,
		DialerRetries:              b.DialerRetries,
		MaintNotificationsConfig:   b.MaintNotificationsConfig,
		// The store follows MOVED and ASK itself, once. go-redis would
		// also resend a command whose connection dropped after sending,
		// which could run a script twice.
		MaxRedirects: noRetries,
	}
	// Every node's client, the seeds' too, is built here.
	w := o.watch
	co.NewClient = func(opt *goredis.Options) *goredis.Client {
		c := newClient(opt)
		if w != nil {
			c.AddHook(w.hook(RoleNode, opt.Addr, opt.TLSConfig != nil))
		}
		return c
	}
	return goredis.NewClusterClient(co), nil
}

// sentinelClient is the client of o.SentinelMaster, found through its
// sentinels. Not go-redis's FailoverClient, which keeps writing to the
// old master for a second after a promotion: see sentinel.go.
func (o *Options) sentinelClient() (goredis.UniversalClient, error) {
	cfg, err := o.tlsConfig(nil)
	if err != nil {
		return nil, err
	}
	node := o.base(o.Username, o.Password, o.Credentials, cfg)
	sentinel := o.base(o.SentinelUsername, o.SentinelPassword, o.SentinelCredentials, cfg)
	sentinel.PoolSize, sentinel.PoolTimeout, sentinel.PipelinePoolSize = 0, 0, 0
	m := newSentinelMaster(o.SentinelMaster, o.SentinelAddrs, sentinel, node, o.watch)
	node.Addr = "sentinel:" + o.SentinelMaster // shown only: m dials
	node.Dialer = m.dial
	node.OnConnect = m.onConnect
	rdb := newClient(&node)
	rdb.AddHook(readOnlyHook{m})
	if o.watch != nil {
		rdb.AddHook(&watchHook{w: o.watch, role: RoleMaster, key: RoleMaster, addr: m.current, tls: cfg != nil})
	}
	return &sentinelClient{Client: rdb, m: m}, nil
}

// sentinelClient is the store's client for a Sentinel master: a plain
// client whose connections go where m says, closed with m.
type sentinelClient struct {
	*goredis.Client
	m *sentinelMaster
}

// Close stops following the master and closes the connections.
func (c *sentinelClient) Close() error {
	c.m.close()
	return c.Client.Close()
}

// redactURLError returns the message of a URL parse error without the URL,
// which may contain a password.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
