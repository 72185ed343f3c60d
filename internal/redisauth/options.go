package redisauth

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// Options says where the Redis credentials that change while the sidecar
// runs come from: files re-read as they change, or AWS or Google Cloud
// IAM tokens. The zero value asks for none: the fixed user names and
// passwords of redis.Options are used as they are. Its errors name the
// sidecar's flags.
type Options struct {
	UserFile             string // --redis-username-file
	PasswordFile         string // --redis-password-file
	SentinelUserFile     string // --redis-sentinel-username-file
	SentinelPasswordFile string // --redis-sentinel-password-file
	AWS                  string // --redis-aws-iam: a key of awsKinds
	AWSName              string // --redis-aws-cache-name
	AWSRegion            string // --redis-aws-region
	GCP                  bool   // --redis-gcp-iam
}

// awsKinds are the values of Options.AWS.
var awsKinds = map[string]struct {
	service    string
	serverless bool
}{
	"elasticache":            {ServiceElastiCache, false},
	"elasticache-serverless": {ServiceElastiCache, true},
	"memorydb":               {ServiceMemoryDB, false},
}

// Validate checks a's fields against each other and against ro, the
// store's options, whose fixed user names and passwords they must not
// contradict.
func (a Options) Validate(ro redis.Options) error {
	switch {
	case a.UserFile != "" && ro.Username != "":
		return errors.New("--redis-username and --redis-username-file: set one")
	case a.SentinelUserFile != "" && ro.SentinelUsername != "":
		return errors.New("--redis-sentinel-username and --redis-sentinel-username-file: set one")
	case ro.ConnMaxLifetime < 0:
		return fmt.Errorf("--redis-conn-max-lifetime: want 0 (none) or more, got %v", ro.ConnMaxLifetime)
	case a.GCP && a.AWS != "":
		return errors.New("--redis-gcp-iam and --redis-aws-iam: set one")
	case a.GCP && a.UserFile != "":
		return errors.New("--redis-gcp-iam and --redis-username-file: set the user, if any, with --redis-username")
	case a.GCP && (ro.Password != "" || a.PasswordFile != ""):
		return errors.New("--redis-gcp-iam takes the access token as the password: drop --redis-password-file, RLS_REDIS_PASSWORD and REDIS_AUTH's password")
	}
	if a.AWS == "" {
		if a.AWSName != "" || a.AWSRegion != "" {
			return errors.New("--redis-aws-cache-name and --redis-aws-region need --redis-aws-iam")
		}
		return nil
	}
	if _, ok := awsKinds[a.AWS]; !ok {
		return fmt.Errorf("--redis-aws-iam: want elasticache, elasticache-serverless or memorydb, got %q", a.AWS)
	}
	switch {
	case a.AWSName == "":
		return errors.New("--redis-aws-iam needs --redis-aws-cache-name: the replication group ID, serverless cache name or MemoryDB cluster name")
	case ro.Username == "":
		return errors.New("--redis-aws-iam needs --redis-username: the IAM-enabled user (for ElastiCache, its user ID, equal to its name)")
	case ro.Password != "" || a.PasswordFile != "":
		return errors.New("--redis-aws-iam signs the password itself: drop --redis-password-file, RLS_REDIS_PASSWORD and REDIS_AUTH's password")
	case ro.ConnMaxLifetime > AWSConnMaxLifetime:
		return fmt.Errorf("--redis-conn-max-lifetime: with --redis-aws-iam want %v or less (AWS closes IAM connections after 12h), got %v", AWSConnMaxLifetime, ro.ConnMaxLifetime)
	}
	return nil
}

// Keeper keeps Redis credentials current: Start runs what refreshes and
// watches them, and Changes and Failures count what every source saw.
type Keeper struct {
	run     []func(context.Context)
	sources []source
}

// source is a source of credentials that counts its changes and
// failures: Secret, AWSToken and GCPToken.
type source interface {
	Changes() uint64
	Failures() uint64
}

// Changes returns the changes of every source.
func (k *Keeper) Changes() uint64 {
	var n uint64
	for _, s := range k.sources {
		n += s.Changes()
	}
	return n
}

// Failures returns the failures of every source.
func (k *Keeper) Failures() uint64 {
	var n uint64
	for _, s := range k.sources {
		n += s.Failures()
	}
	return n
}

// Changing reports whether any credentials change while the sidecar
// runs, and so have metrics to show.
func (k *Keeper) Changing() bool { return len(k.sources) > 0 }

// Credentials sets on ro the credentials that change while the sidecar
// runs, as a asks, from ro's fixed user names and passwords and a's files
// and tokens. It returns what keeps them current; with none to keep, its
// Start does nothing.
func (a Options) Credentials(ctx context.Context, ro *redis.Options, log *zap.Logger) (*Keeper, error) {
	k := &Keeper{}
	if a.AWS != "" {
		kind := awsKinds[a.AWS]
		tok, err := NewAWSToken(ctx, AWSOptions{
			Service: kind.service, Serverless: kind.serverless, Name: a.AWSName, User: ro.Username,
			Region: a.AWSRegion, Log: log,
		})
		if err != nil {
			return nil, fmt.Errorf("--redis-aws-iam: %w", err)
		}
		ro.Credentials = tok
		if ro.ConnMaxLifetime == 0 {
			ro.ConnMaxLifetime = AWSConnMaxLifetime
		}
		k.run = append(k.run, tok.Run)
		k.sources = append(k.sources, tok)
	}
	if a.GCP {
		tok, err := NewGCPToken(ro.Username, nil, log)
		if err != nil {
			return nil, fmt.Errorf("--redis-gcp-iam: %w", err)
		}
		ro.Credentials = tok
		k.run = append(k.run, tok.Run)
		k.sources = append(k.sources, tok)
	}
	node, err := fileCredentials(log, ro.Username, a.UserFile, "--redis-username-file", ro.Password, a.PasswordFile, "--redis-password-file")
	if err != nil {
		return nil, err
	}
	if node != nil {
		ro.Credentials = node
		k.watch(node, log)
	}
	sentinel, err := fileCredentials(log, ro.SentinelUsername, a.SentinelUserFile, "--redis-sentinel-username-file",
		ro.SentinelPassword, a.SentinelPasswordFile, "--redis-sentinel-password-file")
	if err != nil {
		return nil, err
	}
	if sentinel != nil {
		ro.SentinelCredentials = sentinel
		k.watch(sentinel, log)
	}
	return k, nil
}

// fileCredentials returns the credentials of a user name and password
// each fixed or in a file; nil if neither has a file.
func fileCredentials(log *zap.Logger, user, userFile, userFlag, pass, passFile, passFlag string) (*File, error) {
	if userFile == "" && passFile == "" {
		return nil, nil
	}
	var us, ps *Secret
	var err error
	if userFile != "" {
		if us, err = OpenSecret(userFile, log); err != nil {
			return nil, fmt.Errorf("%s: %w", userFlag, err)
		}
	}
	if passFile != "" {
		if ps, err = OpenSecret(passFile, log); err != nil {
			return nil, fmt.Errorf("%s: %w", passFlag, err)
		}
	}
	return NewFile(user, us, pass, ps), nil
}

// watch runs f.Watch, its error logged (credentials that are not
// watched are still checked on every new connection), and counts f's
// files.
func (k *Keeper) watch(f *File, log *zap.Logger) {
	k.run = append(k.run, func(ctx context.Context) {
		if err := f.Watch(ctx); err != nil {
			log.Warn("redis credential files not watched; still read at each new connection", zap.Error(err))
		}
	})
	for _, s := range f.Secrets() {
		k.sources = append(k.sources, s)
	}
}

// Start runs what keeps the credentials current, each in a goroutine,
// until the returned stop is called, which waits for them. Cancelling
// ctx does not stop them: the store uses the credentials until it
// closes.
func (k *Keeper) Start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, fn := range k.run {
		wg.Go(func() { fn(ctx) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
