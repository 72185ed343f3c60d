package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// returnChunk bounds the checks of one refund.lua call of a Return, so
// that no call keeps Redis busy for long.
const returnChunk = 256

// Return gives back hits that a lease took and did not spend: Hits of
// each check's key, granted under receipts[i] (limits.Outcome's
// GrantReceipt). It implements limits.Returner. refund.lua takes back no
// more than the key still holds of them (none once the window they went
// to has ended, and less what a bucket drained since), so a return can
// leave a limit stricter than exact, never looser. It is bounded by ctx
// alone, in calls of at most returnChunk checks per slot (standalone:
// per call), a few at a time.
func (s *Store) Return(ctx context.Context, checks []limits.Check, receipts []int64) error {
	if len(checks) != len(receipts) {
		return fmt.Errorf("redis return: %d checks and %d receipts", len(checks), len(receipts))
	}
	if len(checks) == 0 {
		return nil
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	var gs []*group
	if s.cc == nil {
		g := &group{idx: make([]int, len(checks))}
		for i := range g.idx {
			g.idx[i] = i
		}
		gs = []*group{g}
	} else {
		gs = s.groups(checks)
	}
	var chunks []*group
	for _, g := range gs {
		for len(g.idx) > 0 {
			n := min(len(g.idx), returnChunk)
			c := &group{slot: g.slot, idx: g.idx[:n], admitted: true, out: make([]limits.Outcome, n), receipts: make([]int64, n)}
			for j, i := range c.idx {
				c.receipts[j] = receipts[i]
			}
			chunks = append(chunks, c)
			g.idx = g.idx[n:]
		}
	}
	return s.refundWithin(ctx, checks, now, chunks)
}
