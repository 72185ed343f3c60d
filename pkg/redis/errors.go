package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ReplyError is a reply from Redis that the store cannot read: a script
// and its caller out of step, or a key of the store's prefix written by
// something else. It never wraps limits.ErrStoreUnavailable.
type ReplyError struct {
	Script string // "apply" or "refund"
	Msg    string
}

func (e *ReplyError) Error() string { return "redis " + e.Script + ": bad reply: " + e.Msg }

// wrap annotates an error from a Redis call made under ctx with op.
// Errors that mean Redis cannot be used right now (see unavailable) also
// wrap limits.ErrStoreUnavailable, so callers apply their failure mode.
// When ctx is done, the error wraps ctx's error too: a socket deadline
// that go-redis took from ctx reports itself as an i/o timeout.
func wrap(ctx context.Context, op string, err error) error {
	if ownTimeout(ctx, err) {
		// Not the caller's deadline: keep context.DeadlineExceeded out
		// of the chain, so that the caller sees the store fail
		// (Unavailable), not its own deadline pass.
		if errors.Is(err, limits.ErrPartUnavailable) {
			return fmt.Errorf("redis %s: %w: %w: no answer within the store's timeout: %v", op, limits.ErrStoreUnavailable, limits.ErrPartUnavailable, err)
		}
		return fmt.Errorf("redis %s: %w: no answer within the store's timeout: %v", op, limits.ErrStoreUnavailable, err)
	}
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded // ctx's timer has yet to fire
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	if unavailable(err) {
		return fmt.Errorf("redis %s: %w: %w", op, limits.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("redis %s: %w", op, err)
}

// ownTimeout reports whether err, from a call made under ctx, is the
// store's own timeout: ctx is the deadlineCtx that Apply bounds a call
// by, past its deadline, while the caller's context is not.
func ownTimeout(ctx context.Context, err error) bool {
	dc, ok := ctx.(*deadlineCtx)
	if !ok || dc.Context.Err() != nil {
		return false
	}
	now := time.Now()
	if now.Before(dc.d) {
		return false
	}
	if d, ok := dc.Context.Deadline(); ok && !now.Before(d) {
		return false // the caller's deadline passed too
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// unavailable reports whether err means that Redis is unreachable, too
// slow, or not serving: everything the client itself reports (dial and
// socket errors, timeouts, deadlines, a closed client or pool, sentinel
// and cluster discovery), and the server errors of a node that is down,
// loading, failing over or out of memory, and refusals for the
// configuration (see ConfigError). The other server errors — a script
// error, WRONGTYPE — are bugs or foreign keys, not outages.
func unavailable(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	if _, ok := goredis.IsMovedError(err); ok {
		return true // more redirects than allowed: the cluster is resharding
	}
	if _, ok := goredis.IsAskError(err); ok {
		return true
	}
	return goredis.IsClusterDownError(err) ||
		goredis.IsTryAgainError(err) ||
		goredis.IsLoadingError(err) ||
		goredis.IsReadOnlyError(err) ||
		goredis.IsMasterDownError(err) ||
		goredis.IsMaxClientsError(err) ||
		goredis.IsNoReplicasError(err) ||
		goredis.IsOOMError(err) ||
		goredis.HasErrorPrefix(err, "BUSY") ||
		isConfigError(err)
}

// isConfigError reports whether err is a refusal for the configuration
// (see ConfigError): authentication, or an ACL refusing a command, also
// one called inside a script.
func isConfigError(err error) bool {
	kind, _ := classify(err)
	return kind != ""
}
