package redisauth_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gcptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestOptionsRefused: credential options that contradict each other, or
// the store's fixed user names and passwords, are refused, naming the
// flags.
func TestOptionsRefused(t *testing.T) {
	const pw = "/run/secrets/pw"
	aws := func(a redisauth.Options) redisauth.Options {
		a.AWS, a.AWSName = "memorydb", "c"
		return a
	}
	user := redis.Options{Username: "u"}
	tests := []struct {
		name  string
		give  redisauth.Options
		store redis.Options
		want  string
	}{
		{"user twice", redisauth.Options{UserFile: pw}, redis.Options{Username: "a"}, "--redis-username and --redis-username-file: set one"},
		{"sentinel user twice", redisauth.Options{SentinelUserFile: pw}, redis.Options{SentinelUsername: "a"}, "--redis-sentinel-username and --redis-sentinel-username-file: set one"},
		{"aws kind", redisauth.Options{AWS: "redis", AWSName: "c"}, user, `--redis-aws-iam: want elasticache, elasticache-serverless or memorydb, got "redis"`},
		{"aws no name", redisauth.Options{AWS: "memorydb"}, user, "--redis-aws-iam needs --redis-aws-cache-name"},
		{"aws no user", aws(redisauth.Options{}), redis.Options{}, "--redis-aws-iam needs --redis-username"},
		{"aws and password file", aws(redisauth.Options{PasswordFile: pw}), user, "--redis-aws-iam signs the password itself"},
		{"aws and password", aws(redisauth.Options{}), redis.Options{Username: "u", Password: "p"}, "--redis-aws-iam signs the password itself"},
		{"aws lifetime", aws(redisauth.Options{}), redis.Options{Username: "u", ConnMaxLifetime: 12 * time.Hour}, "--redis-conn-max-lifetime: with --redis-aws-iam want 11h0m0s or less"},
		{"aws name alone", redisauth.Options{AWSName: "c"}, redis.Options{}, "--redis-aws-cache-name and --redis-aws-region need --redis-aws-iam"},
		{"aws region alone", redisauth.Options{AWSRegion: "r"}, redis.Options{}, "need --redis-aws-iam"},
		{"gcp and aws", aws(redisauth.Options{GCP: true}), user, "--redis-gcp-iam and --redis-aws-iam: set one"},
		{"gcp and user file", redisauth.Options{GCP: true, UserFile: pw}, redis.Options{}, "--redis-gcp-iam and --redis-username-file"},
		{"gcp and password file", redisauth.Options{GCP: true, PasswordFile: pw}, redis.Options{}, "--redis-gcp-iam takes the access token as the password"},
		{"gcp and password", redisauth.Options{GCP: true}, redis.Options{Password: "p"}, "--redis-gcp-iam takes the access token as the password"},
		{"negative lifetime", redisauth.Options{}, redis.Options{ConnMaxLifetime: -time.Second}, "--redis-conn-max-lifetime: want 0 (none) or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate(tt.store)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestOptionsAccepted: options that agree pass.
func TestOptionsAccepted(t *testing.T) {
	tests := []struct {
		name  string
		give  redisauth.Options
		store redis.Options
	}{
		{"none", redisauth.Options{}, redis.Options{Username: "u", Password: "p"}},
		{"files", redisauth.Options{UserFile: "u", PasswordFile: "p", SentinelUserFile: "su", SentinelPasswordFile: "sp"}, redis.Options{}},
		{"aws", redisauth.Options{AWS: "elasticache-serverless", AWSName: "c", AWSRegion: "r"}, redis.Options{Username: "u", ConnMaxLifetime: time.Hour}},
		{"gcp", redisauth.Options{GCP: true}, redis.Options{Username: "u"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give.Validate(tt.store); err != nil {
				t.Error(err)
			}
		})
	}
}

// awsEnv gives the AWS SDK's default chain credentials from the
// environment, with instance metadata and config files off, so that
// nothing leaves the machine.
func awsEnv(t *testing.T) {
	env := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "eu-central-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(env, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(env, "credentials"))
}

// TestOptionsAWSLifetime: with AWS IAM tokens connections are recycled
// after 11h unless the store's options ask for less.
func TestOptionsAWSLifetime(t *testing.T) {
	awsEnv(t)
	a := redisauth.Options{AWS: "memorydb", AWSName: "c"}
	for _, tt := range []struct{ give, want time.Duration }{{0, 11 * time.Hour}, {time.Hour, time.Hour}} {
		ro := redis.Options{URL: "redis://127.0.0.1:1", Username: "u", ConnMaxLifetime: tt.give}
		if _, err := a.Credentials(context.Background(), &ro, zaptest.NewLogger(t)); err != nil {
			t.Fatal(err)
		}
		if ro.ConnMaxLifetime != tt.want {
			t.Errorf("ConnMaxLifetime %v: got %v, want %v", tt.give, ro.ConnMaxLifetime, tt.want)
		}
	}
}

// decide applies one hit to a store of ro, or fails the test, then
// calls open, if set, before the store closes.
func decide(t *testing.T, ro redis.Options, open func()) {
	t.Helper()
	ctx := context.Background()
	ro.Timeout, ro.KeyPrefix = testTimeout, "opts:"
	st, err := redis.New(ctx, ro)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer st.Close()
	l, err := limits.NewLimit(limits.FixedWindow, 100, limits.UnitHour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := &limits.Batch{Checks: []limits.Check{{Key: "{k}opts", Limit: l, Hits: 1}}}
	if err := st.Apply(ctx, b); err != nil || !b.Admitted {
		t.Fatalf("Apply: admitted %v, %v", b.Admitted, err)
	}
	if open != nil {
		open()
	}
}

// noSecretLogged fails the test if any log entry holds one of secrets.
func noSecretLogged(t *testing.T, logs *observer.ObservedLogs, secrets ...string) {
	t.Helper()
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, s := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("the log shows a secret (%s): %s", s, line)
			}
		}
	}
}

// TestOptionsAWSIAM: with AWS IAM, signed from the SDK's default chain,
// the store's connections authenticate as the IAM user, and the keeper
// counts the tokens, and no token is logged. Redis checks no SigV4, so the ACL user takes any
// password (nopass).
func TestOptionsAWSIAM(t *testing.T) {
	awsEnv(t)
	srv := redistest.StartServer(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "iam-user", "on", "nopass", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	ro := redis.Options{URL: "redis://" + srv.Addr, Username: "iam-user"}
	a := redisauth.Options{AWS: "elasticache", AWSName: "my-cache"}
	if err := a.Validate(ro); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	k, err := a.Credentials(ctx, &ro, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Start(ctx)()
	defer noSecretLogged(t, logs, "X-Amz-Signature", "Action=connect")
	decide(t, ro, func() {
		clients, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(clients, "user=iam-user") {
			t.Errorf("no connection authenticated as iam-user:\n%s", clients)
		}
	})
	if !k.Changing() || k.Changes() == 0 || k.Failures() != 0 {
		t.Errorf("keeper: changing %v, %d changes, %d failures; want a signed token counted", k.Changing(), k.Changes(), k.Failures())
	}
}

// TestOptionsGCPIAM: with Google Cloud IAM, the store authenticates with
// the access token that Google's credential chain gets (from a service
// account whose token endpoint is on loopback), and logs no token.
func TestOptionsGCPIAM(t *testing.T) {
	ts := gcptest.NewTokenServer(t)
	ts.Setenv(t)
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "tok-1").Err(); err != nil {
		t.Fatal(err)
	}
	ro := redis.Options{URL: "redis://" + srv.Addr}
	core, logs := observer.New(zapcore.DebugLevel)
	k, err := redisauth.Options{GCP: true}.Credentials(ctx, &ro, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Start(ctx)()
	defer noSecretLogged(t, logs, "tok-1")
	decide(t, ro, nil)
	if k.Changes() != 1 {
		t.Errorf("keeper: %d changes, want 1 token", k.Changes())
	}
}

// TestOptionsPasswordFileFixed: a store whose password file holds a
// wrong password fails its probe with Redis's refusal; once the file
// holds the right one, the store connects, with no restart.
func TestOptionsPasswordFileFixed(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "right-pass").Err(); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "password")
	write(t, pwFile, "wrong-pass\n")
	ro := redis.Options{URL: "redis://" + srv.Addr, Timeout: testTimeout}
	k, err := redisauth.Options{PasswordFile: pwFile}.Credentials(ctx, &ro, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Start(ctx)()
	lazy, err := redis.Connect(ctx, ro, redis.LazyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if err := lazy.Probe(ctx); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("probe with the wrong password: %v, want WRONGPASS", err)
	}
	tmp := pwFile + ".tmp"
	write(t, tmp, "right-pass\n")
	if err := os.Rename(tmp, pwFile); err != nil {
		t.Fatal(err)
	}
	// The store retries in the background; each probe is one more try.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
	for err := lazy.Probe(ctx); err != nil; err = lazy.Probe(ctx) {
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("probe once the file is right: %v", err)
		}
	}
	if k.Changes() == 0 {
		t.Error("keeper counts no change of the password file")
	}
}

// TestOptionsFileMissing: a credential file that cannot be read fails
// at once, naming its flag.
func TestOptionsFileMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	tests := []struct {
		give redisauth.Options
		want string
	}{
		{redisauth.Options{UserFile: missing}, "--redis-username-file: "},
		{redisauth.Options{PasswordFile: missing}, "--redis-password-file: "},
		{redisauth.Options{SentinelUserFile: missing}, "--redis-sentinel-username-file: "},
		{redisauth.Options{SentinelPasswordFile: missing}, "--redis-sentinel-password-file: "},
	}
	for _, tt := range tests {
		ro := redis.Options{URL: "redis://127.0.0.1:1"}
		if _, err := tt.give.Credentials(context.Background(), &ro, zaptest.NewLogger(t)); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want one starting %q", tt.give, err, tt.want)
		}
	}
}
