package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// A decision is all or nothing. apply sends a request whose keys share a
// slot (always, but on a Cluster) as one apply.lua call (applyAll). A
// request across slots goes as one group per slot (groups): each group
// reserves (reserve), and if any rejects the request or fails, those that
// reserved are refunded (refund) and report what a rejected request sees
// (reportRejected). A request that a migrating slot refuses whole goes
// again as one group per key (byKey). Refunds within a request
// (limits.Check.Refund) are given back first by the script itself (see
// refundsMark), and are never reported over (refundsNotOver).

// Apply implements limits.Store. Its Redis calls end by the earlier of
// ctx's deadline and Options.Timeout, except a cross-slot refund, which
// gets a fresh Options.Timeout: abandoning it would waste the budgets it
// gives back.
//
// An error may leave hits consumed: a script that timed out on the client
// may still have run. That under-admits; it never over-admits.
func (s *Store) Apply(ctx context.Context, b *limits.Batch) error {
	err := s.apply(ctx, b)
	if err == nil {
		refundsNotOver(b)
	}
	return err
}

// refundsNotOver clears Over on b's refunds, which apply.lua checks for
// zero hits after giving them back: a refund is never refused
// (limits.Check.Refund), even where its limit has nothing left.
func refundsNotOver(b *limits.Batch) {
	for i := range b.Checks {
		if b.Checks[i].Refund {
			b.Outcomes[i].Over = false
		}
	}
}

func (s *Store) apply(ctx context.Context, b *limits.Batch) error {
	n := len(b.Checks)
	b.SizeOutcomes()
	b.Admitted = true
	if n == 0 {
		return nil
	}
	for i := range b.Checks {
		if l := b.Checks[i].Limit; l == nil || l.Window() <= 0 {
			return fmt.Errorf("redis apply: check %d has no limit with a window", i)
		}
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	// Bounded without a timer of its own (see deadlineCtx).
	rctx := withDeadline(ctx, time.Now().Add(s.timeout))
	if s.cc == nil {
		return s.applyAll(rctx, b, now, 0)
	}
	groups := s.groups(b.Checks)
	var err error
	if len(groups) == 1 {
		err = s.applyAll(rctx, b, now, groups[0].slot)
		groups[0].err = err
	} else {
		err = s.applyGroups(ctx, rctx, b, now, groups)
	}
	if err == nil || errors.Is(err, errNotRefunded) || !refusedWhole(groups) {
		return err // going again would count the hits not refunded twice
	}
	// A slot is migrating, and a group's keys are not all on one side of
	// it: some moved and some not, or some on neither yet. Redis refuses
	// a call of several keys on both sides until the migration ends,
	// before running it, but serves one key at a time where it is (ASK).
	// So the request goes again as one group per key, reserving and
	// refunding as a request across slots does. (The groups that had
	// reserved were refunded.)
	if split := s.byKey(b.Checks); len(split) > len(groups) {
		return s.applyGroups(ctx, rctx, b, now, split)
	}
	return err
}

// applyAll decides b in one script call; all its keys share a slot (on
// a Cluster; elsewhere slot is 0).
func (s *Store) applyAll(ctx context.Context, b *limits.Batch, now string, slot uint16) error {
	c := getCall(ctx)
	s.setArgs(c, b.Checks, nil, b.QuotaGroups, now, modeApply)
	reply, err := s.run(c, slot)
	if err != nil {
		return wrap(ctx, "apply", err)
	}
	b.Admitted, err = readApply(reply, b.Outcomes, anyExtra(b.Checks, nil), anyRefund(b.Checks, nil))
	return err
}

// run runs call c, whose keys share slot (as the caller's grouping
// computed it), through the pipe of the node that serves them, and
// recycles c.
func (s *Store) run(c *call, slot uint16) ([]int64, error) {
	if s.cc == nil {
		return s.pipe.do(c)
	}
	c.slot = slot
	node, err := s.cc.MasterForKey(c.ctx, c.keys[0])
	if err != nil {
		putCall(c)
		return nil, err
	}
	return s.runNode(node, c)
}

// group is the checks of one hash slot and what its script call returned.
type group struct {
	slot     uint16
	idx      []int // indices into the batch, in batch order
	admitted bool
	out      []limits.Outcome // if the request is admitted, or g rejected it
	receipts []int64          // -1: nothing consumed
	err      error
}

// groups splits checks by the hash slot of their keys, in order of first
// appearance.
func (s *Store) groups(checks []limits.Check) []*group {
	var gs []*group
next:
	for i := range checks {
		sl := slot(s.prefix, checks[i].Key)
		for _, g := range gs {
			if g.slot == sl {
				g.idx = append(g.idx, i)
				continue next
			}
		}
		gs = append(gs, &group{slot: sl, idx: []int{i}})
	}
	return gs
}

// byKey groups checks by key, each group in its key's slot: the checks of
// one key together, in order of first appearance.
func (s *Store) byKey(checks []limits.Check) []*group {
	var gs []*group
	keys := map[string]*group{}
	for i := range checks {
		k := checks[i].Key
		if g, ok := keys[k]; ok {
			g.idx = append(g.idx, i)
			continue
		}
		g := &group{slot: slot(s.prefix, k), idx: []int{i}}
		keys[k] = g
		gs = append(gs, g)
	}
	return gs
}

// refusedWhole reports whether a group of gs was refused by TRYAGAIN,
// and no group failed otherwise: the request may go again key by key.
func refusedWhole(gs []*group) bool {
	refused := false
	for _, g := range gs {
		switch {
		case g.err == nil:
		case goredis.IsTryAgainError(g.err):
			refused = true
		default:
			return false
		}
	}
	return refused
}

// errNotRefunded marks the error of a request across slots whose
// reservations could not all be refunded.
var errNotRefunded = errors.New("reserved hits not refunded")

// applyGroups decides b as several slot groups: each reserves in parallel,
// and if the request is rejected, the groups that reserved are refunded.
// rctx bounds the reservations; refunds get a fresh timeout from ctx.
func (s *Store) applyGroups(ctx, rctx context.Context, b *limits.Batch, now string, gs []*group) error {
	// Every reservation runs to its end, even when another fails:
	// cancelling one that Redis may already have run would lose its
	// receipts and so leave its hits consumed.
	var eg errgroup.Group
	for _, g := range gs[1:] {
		eg.Go(func() error {
			s.reserve(rctx, b.Checks, now, g)
			return nil
		})
	}
	s.reserve(rctx, b.Checks, now, gs[0])
	_ = eg.Wait()

	var errs []error
	admitted := true
	for _, g := range gs {
		if g.err != nil {
			errs = append(errs, g.err)
		} else if !g.admitted {
			admitted = false
		}
	}
	if admitted && len(errs) == 0 && b.QuotaGroups > 0 {
		// The groups reserved quota checks as shadow checks (see
		// appendCheck): the quota groups' verdict is taken here, from
		// every slot's outcomes.
		admitted = !b.QuotaOver(func(i int) bool { return quotaOver(gs, i) })
	}
	if len(errs) > 0 || !admitted {
		if err := s.refund(ctx, b.Checks, now, gs); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", errNotRefunded, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	b.Admitted = admitted
	for _, g := range gs {
		for j, i := range g.idx {
			b.Outcomes[i] = g.out[j]
		}
	}
	if !admitted {
		s.reportRejected(ctx, b, now, gs)
	}
	return nil
}

// reserve runs apply.lua in reserve mode for g and records the result in g.
func (s *Store) reserve(ctx context.Context, checks []limits.Check, now string, g *group) {
	c := getCall(ctx)
	s.setArgs(c, checks, g.idx, 0, now, modeReserve)
	reply, err := s.run(c, g.slot)
	if err != nil {
		g.err = wrap(ctx, "apply", err)
		return
	}
	g.err = g.read(reply, anyExtra(checks, g.idx), anyRefund(checks, g.idx))
}

// quotaOver reports whether check i of a batch split into gs, all of
// which reserved, was over.
func quotaOver(gs []*group, i int) bool {
	for _, g := range gs {
		for j, k := range g.idx {
			if k == i {
				return g.out[j].Over
			}
		}
	}
	return false
}

// refund gives back every reservation of gs, in parallel. Its calls get
// their own timeout: the request's may be spent, and a refund abandoned
// halfway would leave budgets consumed.
func (s *Store) refund(ctx context.Context, checks []limits.Check, now string, gs []*group) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	return s.refundWithin(ctx, checks, now, gs)
}

// maxRefunds bounds the refund.lua calls of one refund under way at
// once: a Return can have a group for each of thousands of slots.
const maxRefunds = 8

// refundWithin is refund within ctx.
func (s *Store) refundWithin(ctx context.Context, checks []limits.Check, now string, gs []*group) error {
	var eg errgroup.Group
	eg.SetLimit(maxRefunds)
	for _, g := range gs {
		if g.err != nil || !g.admitted {
			continue
		}
		var keys []string
		var spec []byte
		at := s.goMicros(now)
		for j, i := range g.idx {
			if g.receipts[j] < 0 {
				continue
			}
			// The reservation took the check's hits and any it was
			// granted for a lease: give back both.
			c := checks[i]
			c.Hits += g.out[j].Granted
			keys, _ = s.cutKeys(keys, string(s.appendKeys(nil, &c)), &c)
			spec = appendCheck(spec, &c, 0, at)
			spec = appendFloat(spec, float64(g.receipts[j]))
		}
		if len(keys) == 0 {
			continue
		}
		args := []any{now, spec}
		eg.Go(func() error {
			err := refundScript.Run(ctx, s.rdb, keys, args...).Err()
			if isRedirect(err) {
				_, err = s.redirect(ctx, refundScript, keys, args, err)
			}
			if err != nil {
				return wrap(ctx, "refund", err)
			}
			return nil
		})
	}
	return eg.Wait()
}

// reportRejected sets the outcomes of the checks of b's groups that
// reserved, and were refunded because another group rejected b, to what
// they report for a rejected request, decided again after the refund
// without writing (modeReport): the reservations' replies hold
// the state after the hits instead. Should that call fail, those
// outcomes are Unknown: the request is rejected either way, and the
// state after the hits, which no rejected request has, would report a
// limit whose last hit was reserved as having nothing left.
func (s *Store) reportRejected(ctx context.Context, b *limits.Batch, now string, gs []*group) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	var eg errgroup.Group
	for _, g := range gs {
		if !g.admitted {
			continue
		}
		// Extra stays: a check's lease ask counts in the working copy that
		// later checks on its key start from, as in the reservation (a
		// rejected request is granted nothing either way).
		// A usage charge counted in the reservation and is not
		// refunded: its outcome there stands, and the report checks it
		// for zero hits, so as not to count it twice. (An ordinary check
		// before it on its key is reported as the charge left the key.)
		checks := make([]limits.Check, len(g.idx))
		for j, i := range g.idx {
			checks[j] = b.Checks[i]
			if checks[j].Charges() {
				// A refund too gave its hits back in the reservation.
				checks[j].Usage, checks[j].Refund, checks[j].Hits = false, false, 0
				continue
			}
			b.Outcomes[i] = limits.Outcome{Unknown: true} // until the report below
		}
		eg.Go(func() error {
			c := getCall(ctx)
			s.setArgs(c, checks, nil, 0, now, modeReport)
			reply, err := s.run(c, g.slot)
			if err != nil {
				return err
			}
			outs := make([]limits.Outcome, len(checks))
			if _, err := readApply(reply, outs, anyExtra(checks, nil), false); err != nil {
				return err
			}
			for j, i := range g.idx {
				if !b.Checks[i].Charges() {
					b.Outcomes[i] = outs[j]
				}
			}
			return nil
		})
	}
	_ = eg.Wait()
}
