package xds

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff spaces out reconnects, and NACKs of a push the server sends
// again unchanged: initial, then twice the last wait up to max, each
// spread by ±jitter of itself so that many sidecars do not come back in
// step. The zero value must not be used; reset starts over.
type backoff struct {
	initial, max time.Duration
	jitter       float64 // 0 to 1
	cur          time.Duration
}

// next returns how long to wait now.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.initial
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	d := b.cur
	if b.jitter > 0 {
		d = time.Duration(float64(d) * (1 - b.jitter + 2*b.jitter*rand.Float64()))
	}
	return d
}

// reset makes the next wait the initial one again.
func (b *backoff) reset() { b.cur = 0 }

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
