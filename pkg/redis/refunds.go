package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Refunds calls forget with every key, as the engine builds it (without
// the key prefix), that a refund gave hits back to (limits.Check.Refund)
// through any sidecar that shares this store's Redis and key prefix, and
// lost whenever it subscribes again after its connection broke: refunds
// made meanwhile are not known, so what was remembered of every key may
// be wrong. (Its first subscription calls nothing: what a caller
// remembered before it is no older than the sidecar, which is seldom
// older than the subscription.) It returns when ctx is done.
//
// apply.lua publishes each refunded key on RefundsChannel as it gives
// the hits back; go-redis resubscribes after a broken connection. A
// sidecar's deny cache forgets the keys (store.DenyCache.Forget), so that
// a refund makes room on every sidecar, not only on the one that sent it.
// A key is forgotten as soon as the notice arrives: a check that reaches
// another sidecar in the moment between the refund and its notice may
// still be answered over from that sidecar's cache, never admitted
// wrongly.
func (s *Store) Refunds(ctx context.Context, forget func(key string), lost func()) {
	ps := s.rdb.Subscribe(ctx, RefundsChannel)
	defer ps.Close()
	msgs := ps.ChannelWithSubscriptions()
	subscribed := false
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind == "subscribe" {
					if subscribed {
						lost()
					}
					subscribed = true
				}
			case *goredis.Message:
				if key, ok := strings.CutPrefix(m.Payload, s.prefix); ok {
					forget(key)
				}
			}
		}
	}
}

// Refunds is Store.Refunds once the store is connected: until then, it
// waits, and calls neither forget nor lost.
func (l *Lazy) Refunds(ctx context.Context, forget func(key string), lost func()) {
	select {
	case <-ctx.Done():
		return
	case <-l.connected:
	}
	l.store.Load().Refunds(ctx, forget, lost)
}
