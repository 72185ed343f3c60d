package redis

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

var (
	//go:embed scripts/inspect.lua
	inspectSrc string
	// inspectScript shares lib.lua's clock. It is not loaded at startup
	// like the decisions' scripts: only the admin endpoint runs it, and
	// Run sends it whole the first time a node lacks it.
	inspectScript = goredis.NewScript(prelude() + libSrc + inspectSrc)
)

// MaxInspectedLog bounds the entries of a sliding log that Inspect reads:
// a log with more in its window is reported as an InspectError rather
// than copied whole out of Redis.
const MaxInspectedLog = 10_000

// InspectError is a counter that Inspect cannot show.
type InspectError struct {
	Key string
	Msg string
}

func (e *InspectError) Error() string { return "inspect " + e.Key + ": " + e.Msg }

// Inspect reads the stored state of key, a key of limits.AppendKey,
// under l, and Redis's time as the node that holds it reads it: the
// state that the next decision of the key starts from, as
// limits.Limit.Evaluate takes it, and the clock it decides by. A key
// that is missing, or holds what apply.lua would treat as a fresh key,
// reads as the zero state. For a sliding log, only the entries still in
// the window are read, at most MaxInspectedLog. It is for diagnostics:
// it writes nothing, and is bounded by Options.Timeout.
func (s *Store) Inspect(ctx context.Context, key string, l *limits.Limit) (limits.State, time.Time, error) {
	if l == nil || l.Window() <= 0 {
		return limits.State{}, time.Time{}, fmt.Errorf("redis inspect %s: no limit with a window", key)
	}
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMicro(), 10)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	w := strconv.FormatInt(l.Window().Microseconds(), 10)
	if l.Algorithm == limits.Concurrency {
		w = "0" // a slot's score is when it expires
	}
	reply, err := inspectScript.Run(ctx, s.rdb, []string{s.prefix + key}, now, w, MaxInspectedLog).Slice()
	if err != nil {
		return limits.State{}, time.Time{}, wrap(ctx, "inspect", err)
	}
	return decodeState(s.prefix+key, reply, l)
}

// Reset deletes key's state, under l (a sliding log's two keys), and
// reports whether Redis held any. It is bounded by Options.Timeout.
func (s *Store) Reset(ctx context.Context, key string, l *limits.Limit) (bool, error) {
	if l == nil {
		return false, fmt.Errorf("redis reset %s: no limit", key)
	}
	keys := []string{s.prefix + key}
	if l.Algorithm == limits.SlidingLog {
		keys = append(keys, s.prefix+key+logSuffix) // same hash tag, same slot
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := s.rdb.Del(ctx, keys...).Result()
	if err != nil {
		return false, wrap(ctx, "reset", err)
	}
	return n > 0, nil
}

// StoreKey returns the Redis key that holds key's counter: the key
// prefix and key.
func (s *Store) StoreKey(key string) string { return s.prefix + key }

// Inspect is Store.Inspect once connected.
func (l *Lazy) Inspect(ctx context.Context, key string, lim *limits.Limit) (limits.State, time.Time, error) {
	s := l.store.Load()
	if s == nil {
		return limits.State{}, time.Time{}, ErrNotConnected
	}
	return s.Inspect(ctx, key, lim)
}

// Reset is Store.Reset once connected.
func (l *Lazy) Reset(ctx context.Context, key string, lim *limits.Limit) (bool, error) {
	s := l.store.Load()
	if s == nil {
		return false, ErrNotConnected
	}
	return s.Reset(ctx, key, lim)
}

// StoreKey is Store.StoreKey, connected or not.
func (l *Lazy) StoreKey(key string) string { return l.opts.prefix() + key }

// decodeState reads inspect.lua's reply for key under l, as apply.lua
// reads the same value (see the State section of apply.lua).
func decodeState(key string, reply []any, l *limits.Limit) (limits.State, time.Time, error) {
	bad := func(format string, a ...any) (limits.State, time.Time, error) {
		return limits.State{}, time.Time{}, &ReplyError{Script: "inspect", Msg: fmt.Sprintf(format, a...)}
	}
	if len(reply) < 2 {
		return bad("%d values, want 2 or 3", len(reply))
	}
	us, ok1 := reply[0].(int64)
	typ, ok2 := reply[1].(string)
	if !ok1 || !ok2 {
		return bad("%T and %T, want an integer and a string", reply[0], reply[1])
	}
	now := time.UnixMicro(us)
	var v any
	if len(reply) > 2 {
		v = reply[2]
	}
	switch {
	case typ == "zset" && l.Algorithm == limits.SlidingLog:
		if n, ok := v.(int64); ok {
			return limits.State{}, now, &InspectError{Key: key, Msg: fmt.Sprintf("the sliding log holds %d entries in its window, more than the %d Inspect reads", n, MaxInspectedLog)}
		}
		st, err := decodeLog(v, l)
		if err != nil {
			return bad("%v", err)
		}
		return st, now, nil
	case typ == "zset" && l.Algorithm == limits.Concurrency:
		if n, ok := v.(int64); ok {
			return limits.State{}, now, &InspectError{Key: key, Msg: fmt.Sprintf("%d requests in flight, more than the %d Inspect reads", n, MaxInspectedLog)}
		}
		st, err := decodeSlots(v)
		if err != nil {
			return bad("%v", err)
		}
		return st, now, nil
	case typ == "string" && l.Algorithm != limits.SlidingLog && l.Algorithm != limits.Concurrency:
		b, ok := v.(string)
		if !ok {
			return bad("string value is %T", v)
		}
		st, err := decodeRecord(b, l)
		if err != nil {
			return limits.State{}, now, &InspectError{Key: key, Msg: err.Error()}
		}
		return st, now, nil
	}
	// Missing, or of a type apply.lua reads as a fresh key.
	return limits.State{}, now, nil
}

// decodeRecord reads the packed doubles of every algorithm but the
// sliding log. A record of another length is a fresh key to apply.lua,
// and so here.
func decodeRecord(b string, l *limits.Limit) (limits.State, error) {
	w := l.Window().Microseconds()
	f := make([]uint64, 0, 3)
	var debt uint64
	for i := 0; i+8 <= len(b); i += 8 {
		x := float(b, i)
		if x < 0 && i == 8 && l.Algorithm.Bucketed() && x > -(1<<63) && x == math.Trunc(x) {
			// A bucket's level below zero is its debt (lib.lua's levelOf).
			debt, x = uint64(-x), 0
		}
		if x < 0 || x >= 1<<63 || x != math.Trunc(x) {
			return limits.State{}, fmt.Errorf("stored value %v is not a count", x)
		}
		f = append(f, uint64(x))
	}
	switch l.Algorithm {
	case limits.FixedWindow:
		if len(b) != 16 {
			return limits.State{}, nil
		}
		// The window's end: its length is the calendar's for a
		// calendar limit.
		_, end := l.Span(int64(f[0]))
		return limits.State{Start: int64(f[0]), Count: f[1], Expire: end}, nil
	case limits.SlidingWindow:
		if len(b) != 24 {
			return limits.State{}, nil
		}
		return limits.State{Start: int64(f[0]), Count: f[1], Prev: f[2], Expire: int64(f[0]) + 2*w}, nil
	}
	// A bucket: the tick of the last update and its level; the key's own
	// expiry (f[2]) runs later than the bucket's, which the level gives.
	if len(b) != 24 || l.Requests == 0 {
		return limits.State{}, nil
	}
	st := limits.State{Start: int64(f[0]), Count: f[1], Debt: debt}
	if debt > 0 && l.Algorithm == limits.LeakyBucket {
		st.Count = l.Burst * uint64(w/l.Tick()) // empty, and the debt past it
	}
	// The bucket is full again when its backlog has drained.
	st.Expire = l.BucketState(st.Start, l.Backlog(st)).Expire
	return st, nil
}

// decodeLog reads a sliding log's members, "<seq>:<hits>", and scores (µs).
// decodeSlots decodes a concurrency limit's live slots as inspect.lua
// returns them: holds and the scores at which they expire.
func decodeSlots(v any) (limits.State, error) {
	vals, ok := v.([]any)
	if !ok || len(vals)%2 != 0 {
		return limits.State{}, fmt.Errorf("slots are %T of %d values, want hold and score pairs", v, len(vals))
	}
	var st limits.State
	for i := 0; i < len(vals); i += 2 {
		hold, ok1 := vals[i].(string)
		sc, ok2 := vals[i+1].(string)
		until, err := strconv.ParseFloat(sc, 64)
		if !ok1 || !ok2 || err != nil {
			return limits.State{}, fmt.Errorf("slot %v with score %v", vals[i], vals[i+1])
		}
		st.Slots = append(st.Slots, limits.Slot{Hold: hold, Until: int64(until)})
		st.Expire = max(st.Expire, int64(until))
	}
	return st, nil
}

func decodeLog(v any, l *limits.Limit) (limits.State, error) {
	vals, ok := v.([]any)
	if !ok || len(vals)%2 != 0 {
		return limits.State{}, fmt.Errorf("sliding log is %T of %d values, want member and score pairs", v, len(vals))
	}
	var st limits.State
	for i := 0; i < len(vals); i += 2 {
		m, ok1 := vals[i].(string)
		sc, ok2 := vals[i+1].(string)
		_, h, ok3 := strings.Cut(m, ":")
		if !ok1 || !ok2 || !ok3 {
			return limits.State{}, fmt.Errorf("sliding log entry %v %v, want \"<seq>:<hits>\" and a score", vals[i], vals[i+1])
		}
		hits, err1 := strconv.ParseUint(h, 10, 64)
		at, err2 := strconv.ParseFloat(sc, 64)
		if err1 != nil || err2 != nil {
			return limits.State{}, fmt.Errorf("sliding log entry %q with score %q", m, sc)
		}
		st.Log = append(st.Log, limits.LogEntry{At: int64(at), Hits: hits})
	}
	if n := len(st.Log); n > 0 {
		st.Expire = st.Log[n-1].At + l.Window().Microseconds()
	}
	return st, nil
}
