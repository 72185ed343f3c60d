// Package redis is the limits.Store through which sidecars share limits in
// Redis: standalone, Sentinel or Cluster.
//
// One Lua script, scripts/apply.lua, decides all the checks of a request
// at once. It mirrors limits.Limit.Evaluate and reads the time with
// redis.call('TIME'), so no sidecar's clock matters, and it writes nothing
// unless every enforced limit admits the request. On standalone Redis and
// Sentinel a request is decided by exactly one EVALSHA (EVAL once after
// Redis lost its script cache), which may decide other requests of the
// same round trip too. On a Cluster the checks are grouped by hash slot: one
// group is one EVALSHA, and several run in parallel, each reserving
// atomically; if any group rejects the request, the groups that reserved
// are refunded by scripts/refund.lua, so the request stays all-or-nothing.
// While a refund is under way the reserved hits count against other
// requests, which can under-admit for that moment but never over-admit.
// A call that a migrating slot refuses whole (TRYAGAIN: its keys on both
// sides, or some on neither) goes again the same way, one group per key.
//
// Requests made while Options.MaxInflight calls are already out (to the
// node, on a Cluster) wait for the next to end and go together (see
// pipe): those that go to one node as one apply.lua call (on a Cluster,
// whatever their slots), which decides them one after the other, so a
// busy sidecar makes one write and one read per batch instead of per
// request, and Redis one script run. When Redis is a millisecond or more
// away, the store adds round trips beyond MaxInflight, so that a request
// does not wait for another's round trip (see adapt.go).
//
// Keys are Options.KeyPrefix followed by the key of limits.AppendKey; a
// sliding log keeps a second key, the same followed by ":h". Every key
// has a TTL that matches its algorithm, so memory stays bounded however
// many distinct descriptors appear.
//
// Errors that mean Redis is unreachable, too slow or not serving wrap
// limits.ErrStoreUnavailable.
package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

var (
	//go:embed scripts/lib.lua
	libSrc string
	//go:embed scripts/apply.lua
	applySrc string
	//go:embed scripts/refund.lua
	refundSrc string

	// Both scripts share the algorithm codes and lib.lua's arithmetic,
	// prepended at load time.
	applyScript  = goredis.NewScript(prelude() + libSrc + applySrc)
	refundScript = goredis.NewScript(prelude() + libSrc + refundSrc)
)

// prelude returns the scripts' algorithm codes: one Lua constant per
// limits.Algorithm, named after the algorithm in capitals and set to its
// Go value (local FIXED_WINDOW = 0, ...), so that the scripts cannot
// disagree with Go about which number means which algorithm.
func prelude() string {
	var b strings.Builder
	for _, a := range limits.Algorithms {
		fmt.Fprintf(&b, "local %s = %d\n", luaName(a), int(a))
	}
	return b.String()
}

// luaName returns the name of a's constant in the scripts.
func luaName(a limits.Algorithm) string { return strings.ToUpper(a.String()) }

// checkSize is the size of a check's record in apply.lua's ARGV (CHECK in
// lib.lua): two bytes and five float64s.
const checkSize = 2 + 6*8

// logSuffix names a sliding log's second key. Keys of limits.AppendKey end
// in a limit ID, which ends in a digit, so no key ends in it.
const logSuffix = ":h"

// Store is a limits.Store in Redis. It is safe for concurrent use. Create
// it with New and release it with Close.
type Store struct {
	rdb      goredis.UniversalClient
	pipe     *pipe                  // nil on a Cluster
	cc       *goredis.ClusterClient // nil but on a Cluster
	nodes    sync.Map               // on a Cluster: master address → *pipe
	healths  sync.Map               // on a Cluster: master address → *nodeHealth
	probes   probes                 // of the masters cut off (see nodes.go)
	addrs    sync.Map               // on a Cluster: node address → *goredis.Client
	inflight int
	warmer   *warmer
	prefix   string
	timeout  time.Duration
	now      func() time.Time // nil: Redis's clock
}

var _ limits.Store = (*Store)(nil)

// New connects to the Redis that o describes and loads the scripts, so
// the first request is already an EVALSHA. An error from reaching Redis
// wraps limits.ErrStoreUnavailable; an invalid o does not. New is not
// bound by Options.Timeout, only by ctx (and a one-second bound on each
// socket read or write): give ctx a deadline.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	rdb, err := o.client()
	if err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	s := &Store{rdb: rdb, prefix: o.prefix(), timeout: o.timeout(), inflight: o.maxInflight(), warmer: newWarmer(), now: o.Now}
	if cc, ok := rdb.(*goredis.ClusterClient); ok {
		// Before the first command, so that every node is seen.
		s.cc = cc
		cc.OnNewNode(func(n *goredis.Client) { s.addrs.Store(n.Options().Addr, n) })
	} else {
		s.pipe = newPipe(rdb, s.inflight, s.warmer)
	}
	for _, sc := range []*goredis.Script{applyScript, refundScript, probeScript} {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			_ = rdb.Close()
			return nil, wrap(ctx, "load scripts", err)
		}
	}
	if s.pipe != nil {
		s.pipe.seed(ctx)
	}
	return s, nil
}

// Close closes the connections to Redis. Calls after Close fail.
func (s *Store) Close() error {
	s.probes.stop()
	s.warmer.close()
	return s.rdb.Close()
}

// Ping checks that Redis answers within the store's timeout: the master on
// standalone and Sentinel, every master on a Cluster. A Redis that
// answers may still refuse every write: Probe checks that too.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	if cc, ok := s.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = s.rdb.Ping(ctx).Err()
	}
	if err != nil {
		return wrap(ctx, "ping", err)
	}
	return nil
}

// Apply implements limits.Store. Its Redis calls end by the earlier of
// ctx's deadline and Options.Timeout, except a cross-slot refund, which
// gets a fresh Options.Timeout: abandoning it would waste the budgets it
// gives back.
//
// An error may leave hits consumed: a script that timed out on the client
// may still have run. That under-admits; it never over-admits.
func (s *Store) Apply(ctx context.Context, b *limits.Batch) error {
	n := len(b.Checks)
	b.Outcomes = slices.Grow(b.Outcomes[:0], n)[:n]
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

// applyAll decides b in one script call; all its keys share a slot (on
// a Cluster; elsewhere slot is 0).
func (s *Store) applyAll(ctx context.Context, b *limits.Batch, now string, slot uint16) error {
	c := getCall(ctx)
	s.setArgs(c, b.Checks, nil, now, modeApply)
	reply, err := s.run(c, slot)
	if err != nil {
		return wrap(ctx, "apply", err)
	}
	b.Admitted, err = readApply(reply, b.Outcomes, anyExtra(b.Checks, nil))
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
		_, _ = pl.Exec(ctx)
		return cmd.Result()
	}
	reply, err := asking(false)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		return asking(true)
	}
	return reply, err
}

// readApply reads apply.lua's reply to a call without reserve into outs,
// one per check, and returns whether the request was admitted. grants
// says whether a check asked for a lease, so that the reply ends with
// the grants.
func readApply(vals []int64, outs []limits.Outcome, grants bool) (bool, error) {
	n := len(outs)
	if err := checkLen(vals, replyLen(n, 3, grants)); err != nil {
		return false, err
	}
	admitted, err := flag(vals[0])
	if err != nil {
		return false, err
	}
	for i := range outs {
		v := vals[1+3*i:]
		if outs[i], err = outcome(v[0], v[1], v[2]); err != nil {
			return false, err
		}
		if grants {
			if err := readGrant(&outs[i], vals[1+3*n+grantLen*i:]); err != nil {
				return false, err
			}
		}
	}
	return admitted, nil
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
		checks := make([]limits.Check, len(g.idx))
		for j, i := range g.idx {
			checks[j] = b.Checks[i]
			b.Outcomes[i] = limits.Outcome{Unknown: true} // until the report below
		}
		eg.Go(func() error {
			c := getCall(ctx)
			s.setArgs(c, checks, nil, now, modeReport)
			reply, err := s.run(c, g.slot)
			if err != nil {
				return err
			}
			outs := make([]limits.Outcome, len(checks))
			if _, err := readApply(reply, outs, anyExtra(checks, nil)); err != nil {
				return err
			}
			for j, i := range g.idx {
				b.Outcomes[i] = outs[j]
			}
			return nil
		})
	}
	_ = eg.Wait()
}

// reserve runs apply.lua in reserve mode for g and records the result in g.
func (s *Store) reserve(ctx context.Context, checks []limits.Check, now string, g *group) {
	c := getCall(ctx)
	s.setArgs(c, checks, g.idx, now, modeReserve)
	reply, err := s.run(c, g.slot)
	if err != nil {
		g.err = wrap(ctx, "apply", err)
		return
	}
	g.err = g.read(reply, anyExtra(checks, g.idx))
}

// read reads apply.lua's reply to a reserving call into g.
func (g *group) read(vals []int64, grants bool) error {
	n := len(g.idx)
	if err := checkLen(vals, replyLen(n, 4, grants)); err != nil {
		return err
	}
	var err error
	if g.admitted, err = flag(vals[0]); err != nil {
		return err
	}
	g.out = make([]limits.Outcome, n)
	g.receipts = make([]int64, n)
	for j := range n {
		v := vals[1+4*j:]
		if g.out[j], err = outcome(v[0], v[1], v[2]); err != nil {
			return err
		}
		if v[3] < -1 {
			return &ReplyError{Script: "apply", Msg: fmt.Sprintf("receipt %d", v[3])}
		}
		g.receipts[j] = v[3]
		if grants {
			if err := readGrant(&g.out[j], vals[1+4*n+grantLen*j:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// grantLen is the number of values of a check's grant in apply.lua's
// reply: hits, µs and receipt.
const grantLen = 3

// replyLen is the length of apply.lua's reply for n checks of per values
// each, with or without the grants that follow them.
func replyLen(n, per int, grants bool) int {
	if grants {
		return 1 + (per+grantLen)*n
	}
	return 1 + per*n
}

// readGrant reads a check's grant, hits, µs and receipt, into out.
func readGrant(out *limits.Outcome, v []int64) error {
	g, us, receipt := v[0], v[1], v[2]
	if g < 0 || us < 0 || receipt < 0 {
		return &ReplyError{Script: "apply", Msg: fmt.Sprintf("grant %d for %d under %d, want integers >= 0", g, us, receipt)}
	}
	out.Granted, out.GrantFor = uint64(g), time.Duration(us)*time.Microsecond
	out.GrantReceipt = receipt
	return nil
}

// anyExtra reports whether a check of checks idx (nil: all) asks for a
// lease.
func anyExtra(checks []limits.Check, idx []int) bool {
	if idx == nil {
		for i := range checks {
			if checks[i].Extra > 0 {
				return true
			}
		}
		return false
	}
	for _, i := range idx {
		if checks[i].Extra > 0 {
			return true
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
		for j, i := range g.idx {
			if g.receipts[j] < 0 {
				continue
			}
			// The reservation took the check's hits and any it was
			// granted for a lease: give back both.
			c := checks[i]
			c.Hits += g.out[j].Granted
			keys, _ = s.cutKeys(keys, string(s.appendKeys(nil, &c)), &c)
			spec = appendCheck(spec, &c)
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

// returnChunk bounds the checks of one refund.lua call of a Return, so
// that no call keeps Redis busy for long.
const returnChunk = 256

// Return gives back hits that a lease took and did not spend: Hits of
// each check's key, granted under receipts[i] (limits.Outcome's
// GrantReceipt). It implements store.Returner. refund.lua takes back no
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

// apply.lua's modes, its ARGV[2].
const (
	modeApply   = "0" // decide, and write if admitted
	modeReserve = "1" // the same, and return refund receipts (a slot group)
	modeReport  = "2" // decide, write nothing, report as if rejected
)

// setArgs sets the KEYS and ARGV of c, a call of apply.lua in mode, for
// checks idx (nil: all) of checks. The keys and the spec are cut from one
// string, so a call allocates once for them, however many checks it has.
func (s *Store) setArgs(c *call, checks []limits.Check, idx []int, now, mode string) {
	n := len(idx)
	if idx == nil {
		n = len(checks)
	}
	check := func(j int) *limits.Check {
		if idx != nil {
			return &checks[idx[j]]
		}
		return &checks[j]
	}
	b := c.buf[:0]
	for j := range n {
		b = s.appendKeys(b, check(j))
	}
	for j := range n {
		b = appendCheck(b, check(j))
	}
	all := string(b)
	c.buf = b
	for j := range n {
		c.keys, all = s.cutKeys(c.keys, all, check(j))
	}
	c.now, c.mode, c.spec = now, mode, all
	c.checks, c.grants = n, anyExtra(checks, idx)
	c.args = append(c.args[:0], &c.now, &c.mode, &c.spec)
}

// appendKeys appends the keys of c to b, one after the other: its key, and
// for a sliding log its second key.
func (s *Store) appendKeys(b []byte, c *limits.Check) []byte {
	b = append(b, s.prefix...)
	b = append(b, c.Key...)
	if c.Limit.Algorithm == limits.SlidingLog {
		b = append(b, s.prefix...)
		b = append(b, c.Key...)
		b = append(b, logSuffix...)
	}
	return b
}

// cutKeys cuts the keys of c, as appendKeys wrote them, from the front of
// all, appends them to keys, and returns what follows them in all.
func (s *Store) cutKeys(keys []string, all string, c *limits.Check) ([]string, string) {
	n := len(s.prefix) + len(c.Key)
	keys = append(keys, all[:n])
	all = all[n:]
	if c.Limit.Algorithm == limits.SlidingLog {
		n += len(logSuffix)
		keys = append(keys, all[:n])
		all = all[n:]
	}
	return keys, all
}

// appendCheck appends the record of c that both scripts read (SPEC in
// lib.lua): algorithm and shadow (0 or 1) as bytes, then requests, window
// µs, tick µs, burst, hits and extra as little-endian float64s. Binary numbers
// spare Redis parsing decimals; a float64 is exact for every integer that
// limits.Limit allows (below 2^53), and rounds larger hits as Lua would.
func appendCheck(spec []byte, c *limits.Check) []byte {
	l := c.Limit
	shadow := byte(0)
	if l.Shadow {
		shadow = 1
	}
	spec = append(spec, byte(l.Algorithm), shadow)
	spec = appendFloat(spec, float64(l.Requests))
	spec = appendFloat(spec, float64(l.Window().Microseconds()))
	spec = appendFloat(spec, float64(l.Tick()))
	spec = appendFloat(spec, float64(l.Burst))
	spec = appendFloat(spec, float64(c.Hits))
	return appendFloat(spec, float64(c.Extra))
}

// appendFloat appends f as a little-endian float64, struct's '<d'.
func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// replyInts returns reply, the reply to apply.lua as go-redis reads any
// reply, as integers, or err if it is set. A reply that is not an array
// of integers is a ReplyError.
func replyInts(reply any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	vals, ok := reply.([]any)
	if !ok {
		return nil, &ReplyError{Script: "apply", Msg: fmt.Sprintf("%T, want an array", reply)}
	}
	ints := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, &ReplyError{Script: "apply", Msg: fmt.Sprintf("value %d is %T, want an integer", i, v)}
		}
		ints[i] = n
	}
	return ints, nil
}

// checkLen checks that apply.lua's reply has n values.
func checkLen(vals []int64, n int) error {
	if len(vals) != n {
		return &ReplyError{Script: "apply", Msg: fmt.Sprintf("%d values, want %d", len(vals), n)}
	}
	return nil
}

// flag reads a 0 or 1.
func flag(v int64) (bool, error) {
	switch v {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, &ReplyError{Script: "apply", Msg: fmt.Sprintf("flag %d, want 0 or 1", v)}
}

// outcome reads an outcome from the over flag, remaining and reset µs.
func outcome(over, rem, reset int64) (limits.Outcome, error) {
	o, err := flag(over)
	if err != nil {
		return limits.Outcome{}, err
	}
	if rem < 0 || reset < 0 {
		return limits.Outcome{}, &ReplyError{Script: "apply", Msg: fmt.Sprintf("remaining %d and reset %d, want integers >= 0", rem, reset)}
	}
	return limits.Outcome{Over: o, Remaining: uint64(rem), Reset: time.Duration(reset) * time.Microsecond}, nil
}
