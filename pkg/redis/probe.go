package redis

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/probe.lua
	probeSrc    string
	probeScript = goredis.NewScript(probeSrc)
)

// probeName is the probe key's name after the prefix. Keys of
// limits.AppendKey end in a digit, so none is a probe key.
const probeName = "probe"

// maxTagSearch bounds the hash tags Probe tries to find one in a slot of
// every Cluster master: a master serving a single slot has one tag in
// 16384 on average, and no master goes without one in 2^20 tries but
// with a chance of about e^-64.
const maxTagSearch = 1 << 20

// Probe checks that Redis takes a write within the store's timeout: the
// master on standalone and Sentinel, every master that serves a slot on
// a Cluster, each with one call of a script that writes a key of the
// store's prefix and calls every command the decision scripts call.
// Unlike a PING, it fails whenever a decision would: on a Redis out of
// memory (OOM), a read-only replica (READONLY), a master short of
// replicas (NOREPLICAS), or an ACL that refuses the store a command or
// its keys. It is for readiness and circuit-breaker probes. On a Cluster
// it costs a CLUSTER SLOTS too.
//
// It is bounded by ctx's deadline, not by the store's timeout: after an
// outage a probe opens a connection first (connect, HELLO, CLIENT
// SETINFO), several round trips that a Redis milliseconds away cannot
// fit in a request's timeout. Without a deadline it is bounded by the
// larger of the store's timeout and probeTimeout.
func (s *Store) Probe(ctx context.Context) error {
	ctx, cancel := s.probeContext(ctx)
	defer cancel()
	var err error
	if s.cc != nil {
		err = s.probeCluster(ctx)
	} else {
		err = probeScript.Run(ctx, s.rdb, []string{s.prefix + probeName}).Err()
	}
	if err != nil {
		return wrap(ctx, "probe", err)
	}
	return nil
}

// probeTimeout bounds a probe whose context has no deadline.
const probeTimeout = time.Second

// probeContext returns ctx bounded as Probe says.
func (s *Store) probeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, max(s.timeout, probeTimeout))
}

// ProbeAny is Probe, except that on a Cluster it succeeds once any
// master that serves a slot takes the write: the probe of a breaker in
// front of the whole store, whose masters each have a breaker of their
// own (see nodes.go), so that one dead master does not keep every other
// one behind it.
func (s *Store) ProbeAny(ctx context.Context) error {
	if s.cc == nil {
		return s.Probe(ctx)
	}
	ctx, cancel := s.probeContext(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		ok   bool
	)
	// Each master is asked for the layout itself: a dead one must not
	// fail the lot.
	_ = s.cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		served := false
		ranges, err := c.ClusterSlots(ctx).Result()
		if err == nil {
			served, err = s.probeMaster(ctx, c, probeTags(ranges))
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		} else if served {
			ok = true
		}
		return nil
	})
	if ok {
		return nil
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no master serves a slot"))
	}
	return wrap(ctx, "probe", errors.Join(errs...))
}

// probeCluster runs the probe script on every master that the cluster
// says serves a slot, with a key in one of its slots, in parallel.
func (s *Store) probeCluster(ctx context.Context) error {
	ranges, err := s.cc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	tags := probeTags(ranges)
	return s.cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		_, err := s.probeMaster(ctx, c, tags)
		return err
	})
}

// probeMaster runs the probe script on master c, with a key of a slot
// that tags (probeTags) says it serves. served is false, and nothing is
// run, if it serves none: it decides nothing.
func (s *Store) probeMaster(ctx context.Context, c *goredis.Client, tags map[string]string) (served bool, _ error) {
	tag, ok := tags[c.Options().Addr]
	switch {
	case !ok:
		return false, nil
	case tag == "":
		return true, errNoProbeTag
	}
	key := s.prefix + probeName + "{" + tag + "}"
	return true, probeScript.Run(ctx, c, []string{key}).Err()
}

// errNoProbeTag is probeTags's failure, which maxTagSearch makes all
// but impossible.
var errNoProbeTag = errors.New("no hash tag found for a master's slots")

// probeTags returns, for each master address in ranges (CLUSTER SLOTS),
// a hash tag whose slot that master serves: the first of "0", "1", ...
// A master none is found for within maxTagSearch tries maps to "".
func probeTags(ranges []goredis.ClusterSlot) map[string]string {
	tags := map[string]string{}
	for _, r := range ranges {
		if len(r.Nodes) > 0 {
			tags[r.Nodes[0].Addr] = ""
		}
	}
	for i, left := 0, len(tags); i < maxTagSearch && left > 0; i++ {
		tag := strconv.Itoa(i)
		sl := int(crc16(0, tag) % slotCount)
		for _, r := range ranges {
			if sl < r.Start || sl > r.End || len(r.Nodes) == 0 {
				continue
			}
			if tags[r.Nodes[0].Addr] == "" {
				tags[r.Nodes[0].Addr] = tag
				left--
			}
			break
		}
	}
	return tags
}
