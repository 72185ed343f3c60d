package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redisauth"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// redisAuthSettings are the flags of Redis credentials that change while
// the sidecar runs (the password files are settings' own).
type redisAuthSettings struct {
	userFile         string // --redis-username-file
	sentinelUserFile string // --redis-sentinel-username-file
	aws              string // --redis-aws-iam
	awsName          string // --redis-aws-cache-name
	awsRegion        string // --redis-aws-region
	gcp              bool   // --redis-gcp-iam
}

// The values of --redis-aws-iam.
var redisAWSKinds = map[string]struct {
	service    string
	serverless bool
}{
	"elasticache":            {redisauth.ServiceElastiCache, false},
	"elasticache-serverless": {redisauth.ServiceElastiCache, true},
	"memorydb":               {redisauth.ServiceMemoryDB, false},
}

// checkRedisAuth checks the credential flags against each other.
func (c *settings) checkRedisAuth() error {
	a := c.redisAuth
	switch {
	case a.userFile != "" && c.redis.Username != "":
		return errors.New("--redis-username and --redis-username-file: set one")
	case a.sentinelUserFile != "" && c.redis.SentinelUsername != "":
		return errors.New("--redis-sentinel-username and --redis-sentinel-username-file: set one")
	case c.redis.ConnMaxLifetime < 0:
		return fmt.Errorf("--redis-conn-max-lifetime: want 0 (none) or more, got %v", c.redis.ConnMaxLifetime)
	case a.gcp && a.aws != "":
		return errors.New("--redis-gcp-iam and --redis-aws-iam: set one")
	case a.gcp && a.userFile != "":
		return errors.New("--redis-gcp-iam and --redis-username-file: set the user, if any, with --redis-username")
	case a.gcp && (c.redis.Password != "" || c.redisPasswordFile != ""):
		return errors.New("--redis-gcp-iam takes the access token as the password: drop --redis-password-file, RLS_REDIS_PASSWORD and REDIS_AUTH's password")
	}
	if a.aws == "" {
		if a.awsName != "" || a.awsRegion != "" {
			return errors.New("--redis-aws-cache-name and --redis-aws-region need --redis-aws-iam")
		}
		return nil
	}
	if _, ok := redisAWSKinds[a.aws]; !ok {
		return fmt.Errorf("--redis-aws-iam: want elasticache, elasticache-serverless or memorydb, got %q", a.aws)
	}
	switch {
	case a.awsName == "":
		return errors.New("--redis-aws-iam needs --redis-aws-cache-name: the replication group ID, serverless cache name or MemoryDB cluster name")
	case c.redis.Username == "":
		return errors.New("--redis-aws-iam needs --redis-username: the IAM-enabled user (for ElastiCache, its user ID, equal to its name)")
	case c.redis.Password != "" || c.redisPasswordFile != "":
		return errors.New("--redis-aws-iam signs the password itself: drop --redis-password-file, RLS_REDIS_PASSWORD and REDIS_AUTH's password")
	case c.redis.ConnMaxLifetime > redisauth.AWSConnMaxLifetime:
		return fmt.Errorf("--redis-conn-max-lifetime: with --redis-aws-iam want %v or less (AWS closes IAM connections after 12h), got %v", redisauth.AWSConnMaxLifetime, c.redis.ConnMaxLifetime)
	}
	return nil
}

// credentialKeeper is what keeps the Redis credentials current: funcs
// to run until the store closes, and the sources, for their metrics.
type credentialKeeper struct {
	run     []func(context.Context)
	sources []credentialSource
}

// credentialSource is a source of credentials that counts its changes
// and failures: redisauth.Secret and redisauth.AWSToken.
type credentialSource interface {
	Changes() uint64
	Failures() uint64
}

// changes returns the changes of every source.
func (k *credentialKeeper) changes() uint64 {
	var n uint64
	for _, s := range k.sources {
		n += s.Changes()
	}
	return n
}

// failures returns the failures of every source.
func (k *credentialKeeper) failures() uint64 {
	var n uint64
	for _, s := range k.sources {
		n += s.Failures()
	}
	return n
}

// redisCredentials sets on o the credentials that change while the
// sidecar runs, as the flags ask: files re-read as they change, or AWS
// or Google Cloud IAM tokens. It returns what keeps them current; its run is nil if
// nothing needs to.
func redisCredentials(ctx context.Context, c *settings, o *redis.Options, log *zap.Logger) (k *credentialKeeper, err error) {
	a := c.redisAuth
	k = &credentialKeeper{}
	if a.aws != "" {
		kind := redisAWSKinds[a.aws]
		tok, err := redisauth.NewAWSToken(ctx, redisauth.AWSOptions{
			Service: kind.service, Serverless: kind.serverless, Name: a.awsName, User: c.redis.Username,
			Region: a.awsRegion, Log: log,
		})
		if err != nil {
			return nil, fmt.Errorf("--redis-aws-iam: %w", err)
		}
		o.Credentials = tok
		if o.ConnMaxLifetime == 0 {
			o.ConnMaxLifetime = redisauth.AWSConnMaxLifetime
		}
		k.run = append(k.run, tok.Run)
		k.sources = append(k.sources, tok)
	}
	if a.gcp {
		tok, err := redisauth.NewGCPToken(c.redis.Username, nil, log)
		if err != nil {
			return nil, fmt.Errorf("--redis-gcp-iam: %w", err)
		}
		o.Credentials = tok
		k.run = append(k.run, tok.Run)
		k.sources = append(k.sources, tok)
	}
	node, err := fileCredentials(log, c.redis.Username, a.userFile, "--redis-username-file", c.redis.Password, c.redisPasswordFile, "--redis-password-file")
	if err != nil {
		return nil, err
	}
	if node != nil {
		o.Credentials = node
		k.watch(node, log)
	}
	sentinel, err := fileCredentials(log, c.redis.SentinelUsername, a.sentinelUserFile, "--redis-sentinel-username-file",
		c.redis.SentinelPassword, c.sentinelPassFile, "--redis-sentinel-password-file")
	if err != nil {
		return nil, err
	}
	if sentinel != nil {
		o.SentinelCredentials = sentinel
		k.watch(sentinel, log)
	}
	return k, nil
}

// fileCredentials returns the credentials of a user name and password
// each fixed or in a file; nil if neither has a file.
func fileCredentials(log *zap.Logger, user, userFile, userFlag, pass, passFile, passFlag string) (*redisauth.File, error) {
	if userFile == "" && passFile == "" {
		return nil, nil
	}
	var us, ps *redisauth.Secret
	var err error
	if userFile != "" {
		if us, err = redisauth.OpenSecret(userFile, log); err != nil {
			return nil, fmt.Errorf("%s: %w", userFlag, err)
		}
	}
	if passFile != "" {
		if ps, err = redisauth.OpenSecret(passFile, log); err != nil {
			return nil, fmt.Errorf("%s: %w", passFlag, err)
		}
	}
	return redisauth.NewFile(user, us, pass, ps), nil
}

// watch runs f.Watch, its error logged (credentials that are not
// watched are still checked on every new connection), and counts f's
// files.
func (k *credentialKeeper) watch(f *redisauth.File, log *zap.Logger) {
	k.run = append(k.run, func(ctx context.Context) {
		if err := f.Watch(ctx); err != nil {
			log.Warn("redis credential files not watched; still read at each new connection", zap.Error(err))
		}
	})
	for _, s := range f.Secrets() {
		k.sources = append(k.sources, s)
	}
}

// runAll runs each of fns in a goroutine until the returned stop is
// called, which waits for them.
func runAll(ctx context.Context, fns []func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(func() { fn(ctx) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// redisConnMaxLifetimeHelp is --redis-conn-max-lifetime's help.
const redisConnMaxLifetimeHelp = "close a Redis connection once it is this old, between requests, so none outlives rotated credentials (0: never; with --redis-aws-iam, 0 means 11h)"
