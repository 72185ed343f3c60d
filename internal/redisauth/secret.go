// Package redisauth keeps the credentials that the Redis store opens
// each new connection with, from sources that change while the sidecar
// runs: files that a secret manager rewrites (Kubernetes secret volumes,
// Vault Agent, external-secrets), and AWS IAM auth tokens for ElastiCache
// and MemoryDB. Each source is a redis.Credentials.
//
// Values are never logged.
package redisauth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// Secret is the content of a file holding one secret (a password, a
// token or a user name), without trailing line ends, kept current as the
// file changes. It is safe for concurrent use.
//
// Value checks the file (one stat) before it answers and reads it again
// if it is another file or was modified, so that a connection opened right
// after the file changed already uses the new secret, before any watch
// event; Watch re-reads it on the file system's events too, to log the
// change while no connection is opened. A file that cannot be read, or is
// empty (a writer that truncates before it writes), keeps the last value.
type Secret struct {
	path string
	log  *zap.Logger

	mu      sync.Mutex
	val     string
	seen    os.FileInfo // the file last read, or last failed; nil before
	missing bool        // the file was last found missing

	changes  atomic.Uint64
	failures atomic.Uint64
}

// ErrEmpty is the error of a secret file that holds nothing.
var ErrEmpty = errors.New("file is empty")

// OpenSecret reads the secret in the file at path. A file that cannot be
// read is an error; so is an empty one.
func OpenSecret(path string, log *zap.Logger) (*Secret, error) {
	s := &Secret{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	v, err := read(path)
	if err != nil {
		return nil, err
	}
	s.val, s.seen = v, fi
	return s, nil
}

// read returns the secret in the file at path.
func read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	return v, nil
}

// Value returns the secret as the file holds it now.
func (s *Secret) Value() string {
	fi, err := os.Stat(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.seen != nil && sameVersion(fi, s.seen) {
		return s.val
	}
	s.loadLocked(fi, err)
	return s.val
}

// reload reads the file again, whatever its stat says: an edit in place
// within the file system's time granularity leaves it unchanged.
func (s *Secret) reload() {
	fi, err := os.Stat(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadLocked(fi, err)
}

// loadLocked reads the file that stat found (fi, or statErr), and
// records it as seen. Requires s.mu held.
func (s *Secret) loadLocked(fi os.FileInfo, statErr error) {
	err := statErr
	v := ""
	if err == nil {
		v, err = read(s.path)
	}
	if err != nil {
		// Warn once per version of the file, or once while it is
		// missing, not on every connection.
		again := s.missing
		if fi != nil {
			again = s.seen != nil && sameVersion(fi, s.seen)
			s.seen = fi
		}
		s.missing = fi == nil
		if !again {
			s.failures.Add(1)
			s.log.Warn("redis credential file unreadable; keeping its last value", zap.String("path", s.path), zap.Error(err))
		}
		return
	}
	s.seen, s.missing = fi, false
	if v != s.val {
		s.val = v
		s.changes.Add(1)
		s.log.Info("redis credential file changed; new connections use it", zap.String("path", s.path))
	}
}

// sameVersion reports whether a and b describe the same file, unmodified.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// Changes returns how often the secret changed since it was opened.
func (s *Secret) Changes() uint64 { return s.changes.Load() }

// Failures returns how often the file could not be read, or was empty.
func (s *Secret) Failures() uint64 { return s.failures.Load() }

// Watch re-reads the file whenever the file system says it may have
// changed, until ctx ends. It follows a symbolic link's target, as
// Kubernetes swaps a secret volume's ..data link (config.WatchFile).
func (s *Secret) Watch(ctx context.Context) error {
	return config.WatchFile(ctx, s.path, 0, s.log, s.reload)
}
