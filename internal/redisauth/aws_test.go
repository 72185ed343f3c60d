package redisauth_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

var (
	signedAt  = time.Date(2026, 12, 2, 5, 30, 0, 0, time.UTC)
	testCreds = aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "session/token+1="}
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newToken(t *testing.T, o redisauth.AWSOptions) *redisauth.AWSToken {
	t.Helper()
	tok, err := redisauth.NewAWSToken(context.Background(), o)
	if err != nil {
		t.Fatalf("NewAWSToken: %v", err)
	}
	return tok
}

// TestAWSTokenFormat checks the token against the AWS SDK's own presigner
// for the same request, credentials and time, and against the format AWS
// documents, with the SigV4 signature computed here from its definition.
func TestAWSTokenFormat(t *testing.T) {
	tests := []struct {
		name     string
		give     redisauth.AWSOptions
		wantTail string // query parameters before X-Amz-*, as AWS lists them
	}{
		{"elasticache", redisauth.AWSOptions{Service: "elasticache", Name: "my-cache", User: "app-user"}, "Action=connect&User=app-user"},
		{"elasticache serverless", redisauth.AWSOptions{Service: "elasticache", Name: "my-serverless", User: "app-user", Serverless: true}, "Action=connect&ResourceType=ServerlessCache&User=app-user"},
		{"memorydb", redisauth.AWSOptions{Service: "memorydb", Name: "my-cluster", User: "app user"}, "Action=connect&User=app%20user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.give
			o.Region = "eu-west-1"
			o.Credentials = credentials.StaticCredentialsProvider{Value: testCreds}
			o.Now = func() time.Time { return signedAt }
			user, tok, err := newToken(t, o).Credentials(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if user != o.User {
				t.Errorf("user %q, want %q", user, o.User)
			}

			want := presign(t, o, signedAt)
			if tok != strings.TrimPrefix(want, "http://") {
				t.Errorf("token\n%s\nwant the SDK's presigned URL without its scheme\n%s", tok, want)
			}

			// AWS's documented format.
			if strings.Contains(tok, "://") {
				t.Fatalf("token %q has a scheme", tok)
			}
			u, err := url.Parse("http://" + tok)
			if err != nil {
				t.Fatal(err)
			}
			if u.Host != o.Name || u.Path != "/" {
				t.Errorf("token host %q path %q, want %q and /", u.Host, u.Path, o.Name)
			}
			got := u.Query()
			wantParams := map[string]string{
				"Action":               "connect",
				"User":                 o.User,
				"X-Amz-Algorithm":      "AWS4-HMAC-SHA256",
				"X-Amz-Credential":     "AKIDEXAMPLE/20261202/eu-west-1/" + o.Service + "/aws4_request",
				"X-Amz-Date":           "20261202T053000Z",
				"X-Amz-Expires":        "900",
				"X-Amz-SignedHeaders":  "host",
				"X-Amz-Security-Token": testCreds.SessionToken,
			}
			if o.Serverless {
				wantParams["ResourceType"] = "ServerlessCache"
			}
			for k, v := range wantParams {
				if got.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, got.Get(k), v)
				}
			}
			if len(got) != len(wantParams)+1 {
				t.Errorf("parameters %v, want those of %v and X-Amz-Signature", got, wantParams)
			}
			if sig := sigV4(u, o.Service, o.Region); got.Get("X-Amz-Signature") != sig {
				t.Errorf("X-Amz-Signature = %q, want %q by SigV4's definition", got.Get("X-Amz-Signature"), sig)
			}
			if !strings.HasPrefix(u.RawQuery, tt.wantTail) {
				t.Errorf("query %q does not start %q", u.RawQuery, tt.wantTail)
			}
		})
	}
}

// presign returns the URL that the SDK's presigner gives for o's token
// at time at, called as AWS's examples call it.
func presign(t *testing.T, o redisauth.AWSOptions, at time.Time) string {
	t.Helper()
	q := url.Values{"Action": {"connect"}, "User": {o.User}, "X-Amz-Expires": {"900"}}
	if o.Serverless {
		q.Set("ResourceType", "ServerlessCache")
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+o.Name+"/?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), testCreds, req,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", o.Service, o.Region, at)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// sigV4 computes the SigV4 query signature of the presigned GET u, from
// AWS's definition of the canonical request and the signing key.
func sigV4(u *url.URL, service, region string) string {
	q := u.Query()
	q.Del("X-Amz-Signature")
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	enc := func(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }
	var parts []string
	for _, k := range keys {
		parts = append(parts, enc(k)+"="+enc(q.Get(k)))
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	canonical := strings.Join([]string{"GET", "/", strings.Join(parts, "&"), "host:" + u.Host + "\n", "host", sum("")}, "\n")
	amzDate := q.Get("X-Amz-Date")
	scope := amzDate[:8] + "/" + region + "/" + service + "/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + sum(canonical)
	mac := func(key []byte, s string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	key := []byte("AWS4" + testCreds.SecretAccessKey)
	for _, p := range []string{amzDate[:8], region, service, "aws4_request"} {
		key = mac(key, p)
	}
	return hex.EncodeToString(mac(key, toSign))
}

// TestAWSTokenDefaultChain: with no credentials given, the token is
// signed with the SDK's default chain, here the environment, and the
// region is the SDK's too. Instance metadata and config files are off, so
// nothing leaves the machine.
func TestAWSTokenDefaultChain(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-env")
	t.Setenv("AWS_SESSION_TOKEN", "token-from-env")
	t.Setenv("AWS_REGION", "ap-southeast-2")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_PROFILE", "")
	tok := newToken(t, redisauth.AWSOptions{Service: "memorydb", Name: "c", User: "u", Now: func() time.Time { return signedAt }})
	_, pw, err := tok.Credentials(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse("http://" + pw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if got, want := q.Get("X-Amz-Credential"), "AKIDFROMENV/20261202/ap-southeast-2/memorydb/aws4_request"; got != want {
		t.Errorf("X-Amz-Credential = %q, want %q", got, want)
	}
	if got := q.Get("X-Amz-Security-Token"); got != "token-from-env" {
		t.Errorf("X-Amz-Security-Token = %q, want the environment's", got)
	}
}

// TestAWSTokenOptionsRefused: options that cannot sign a token are
// refused, each problem named.
func TestAWSTokenOptionsRefused(t *testing.T) {
	_, err := redisauth.NewAWSToken(context.Background(), redisauth.AWSOptions{Service: "redis", Serverless: true, Region: "r",
		Credentials: credentials.StaticCredentialsProvider{Value: testCreds}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`AWS service "redis"`, "serverless", "no cache name", "no user"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestAWSTokenRefresh: Run signs a token at once and every five minutes
// after, in fake time; a connection takes the last one, and signs one
// itself once the last is ten minutes old.
func TestAWSTokenRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tok := newToken(t, redisauth.AWSOptions{Service: "elasticache", Name: "c", User: "u", Region: "us-east-1",
			Credentials: credentials.StaticCredentialsProvider{Value: testCreds}})
		date := func() string {
			_, pw, err := tok.Credentials(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse("http://" + pw)
			if err != nil {
				t.Fatal(err)
			}
			return u.Query().Get("X-Amz-Date")
		}
		start := time.Now().UTC()
		stamp := func(d time.Duration) string { return start.Add(d).Format("20060102T150405Z") }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { tok.Run(ctx); close(done) }()
		synctest.Wait()
		if got := date(); got != stamp(0) {
			t.Errorf("token signed at %s, want %s (at once)", got, stamp(0))
		}
		time.Sleep(4 * time.Minute)
		if got := date(); got != stamp(0) {
			t.Errorf("after 4m: token signed at %s, want %s", got, stamp(0))
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := date(); got != stamp(5*time.Minute) {
			t.Errorf("after 5m: token signed at %s, want %s", got, stamp(5*time.Minute))
		}
		cancel()
		<-done
		// Without Run, a token ten minutes old is signed again.
		time.Sleep(10 * time.Minute)
		if got := date(); got != stamp(15*time.Minute) {
			t.Errorf("after Run stopped, 10m on: token signed at %s, want %s", got, stamp(15*time.Minute))
		}
	})
}

// TestAWSTokenAuthenticates: connections authenticate as the token's
// user with the token as password, and take a new token once the last is
// ten minutes old. Redis checks no SigV4, so the ACL user's password is
// set to the token the SDK's presigner gives for the time: first the
// first token, then only the one signed eleven minutes later.
func TestAWSTokenAuthenticates(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Client(t)
	clk := &clock{t: signedAt}
	o := redisauth.AWSOptions{Service: "elasticache", Name: "my-cache", User: "app", Region: "us-east-1",
		Credentials: credentials.StaticCredentialsProvider{Value: testCreds}, Now: clk.now}
	tok := newToken(t, o)
	ctx := context.Background()
	setPass := func() {
		t.Helper()
		pw := strings.TrimPrefix(presign(t, o, clk.now()), "http://")
		if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", "resetpass", ">"+pw, "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	setPass()
	st, err := redis.New(ctx, redis.Options{URL: "redis://" + s.Addr, Credentials: tok, ConnMaxLifetime: time.Nanosecond,
		Timeout: testTimeout, KeyPrefix: "aws:"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer st.Close()
	l, err := limits.NewLimit(limits.FixedWindow, 100, limits.UnitHour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	apply := func() {
		t.Helper()
		b := &limits.Batch{Checks: []limits.Check{{Key: "{k}aws", Limit: l, Hits: 1}}}
		if err := st.Apply(ctx, b); err != nil || !b.Admitted {
			t.Fatalf("Apply: admitted %v, %v", b.Admitted, err)
		}
	}
	apply()
	clk.add(11 * time.Minute)
	setPass() // the first token no longer authenticates
	apply()
	log := admin.Do(ctx, "ACL", "LOG")
	if err := log.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(log.Val().([]any)); n != 0 {
		t.Errorf("ACL LOG has %d entries, want none (no failed AUTH)", n)
	}
}
