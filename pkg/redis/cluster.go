package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

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

// refusedRun reports whether err is a Cluster node's refusal, before
// running anything, of an apply.lua call of several requests because a
// slot of theirs is not its to serve right now, or not all of it:
// MOVED or ASK for the call's declared keys, TRYAGAIN when some of them
// have moved to another node mid-migration and some have not, or, for a
// call of several slots (no KEYS), the script's first read of a key of
// such a slot ("non local key"). A redirection of the whole call must
// not be followed for every request: each request's keys may be on
// either side of a migration.
func (p *pipe) refusedRun(err error) bool {
	if p.redirect == nil || err == nil {
		return false
	}
	return isRedirect(err) || goredis.HasErrorPrefix(err, "TRYAGAIN") || strings.Contains(err.Error(), "non local key")
}

// redirected reports whether err is a Cluster node's refusal to run a
// call whose slot it does not serve right now, and p can send the call
// where the refusal points.
func (p *pipe) redirected(err error) bool {
	return p.redirect != nil && isRedirect(err)
}

// isRedirect reports whether err is MOVED or ASK.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	_, moved := goredis.IsMovedError(err)
	_, ask := goredis.IsAskError(err)
	return moved || ask
}
