package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// errNotRefunded marks the error of a request across slots whose
// reservations could not all be refunded.
var errNotRefunded = errors.New("reserved hits not refunded")

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

// nodePipe returns the pipe of a master's client. Pipes are kept by
// address, so a node that go-redis replaces does not leave its old pipe
// behind.
func (s *Store) nodePipe(node *goredis.Client) *pipe {
	addr := node.Options().Addr
	for {
		v, ok := s.nodes.Load(addr)
		if ok && v.(*pipe).rdb == node {
			return v.(*pipe)
		}
		p := newPipe(node, s.inflight, s.warmer)
		p.redirect, p.cross = s.redirectApply, true
		if ok {
			if s.nodes.CompareAndSwap(addr, v, p) {
				return p
			}
		} else if _, loaded := s.nodes.LoadOrStore(addr, p); !loaded {
			return p
		}
	}
}

func (s *Store) redirectApply(ctx context.Context, keys []string, args []any, refusal error) ([]int64, error) {
	return replyInts(s.redirect(ctx, applyScript, keys, args, refusal))
}

// redirect sends a call of sc that a master refused with MOVED or ASK
// once more, to the node the refusal names. Once only: a second refusal
// fails the call, and the request takes the failure mode. The cluster
// client does not follow redirections for the store because it would
// also resend a command after a dropped connection, and so could run a
// script twice.
func (s *Store) redirect(ctx context.Context, sc *goredis.Script, keys []string, args []any, refusal error) (any, error) {
	addr, moved := goredis.IsMovedError(refusal)
	ask := false
	if moved {
		s.cc.ReloadState(ctx) // learn the new layout, in the background
	} else if addr, ask = goredis.IsAskError(refusal); !ask {
		return nil, refusal
	}
	v, ok := s.addrs.Load(addr)
	if !ok {
		return nil, refusal // a node the client has yet to discover
	}
	node := v.(*goredis.Client)
	if moved {
		return sc.Run(ctx, node, keys, args...).Result()
	}
	// ASKING lets the next command on its connection use the importing
	// slot: a pipeline keeps the two on one connection.
	asking := func(eval bool) (any, error) {
		pl := node.Pipeline()
		pl.Do(ctx, "ASKING")
		var cmd *goredis.Cmd
		if eval {
			cmd = sc.Eval(ctx, pl, keys, args...)
		} else {
			cmd = sc.EvalSha(ctx, pl, keys, args...)
		}
		_, execErr := pl.Exec(ctx)
		reply, err := cmd.Result()
		if err == nil && reply == nil && execErr != nil {
			err = execErr // a Redis error opening the connection: see exec
		}
		return reply, err
	}
	reply, err := asking(false)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		return asking(true)
	}
	return reply, err
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
