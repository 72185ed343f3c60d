package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestInspect(t *testing.T) {
	storetest.RunInspect(t, func(t *testing.T, clk *storetest.Clock) storetest.Inspector {
		return memory.New(memory.Options{Now: clk.Now})
	})
}

// An evicted key reads as the ghost table makes it start: at least as
// full as it was, and as the store itself would decide it.
func TestInspectEvicted(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	s := memory.New(memory.Options{Now: clk.Now, MaxKeys: 64})
	l, err := limits.NewLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return storetest.Key(t.Name(), fmt.Sprint("user", i), l) }
	apply := func(k string, hits uint64) limits.Outcome {
		b := &limits.Batch{Checks: []limits.Check{{Key: k, Limit: l, Hits: hits}}}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		return b.Outcomes[0]
	}
	apply(key(0), 3)
	for i := 1; i < 1000 && s.Holds(key(0)); i++ {
		apply(key(i), 1)
	}
	if s.Holds(key(0)) {
		t.Fatal("key 0 was never evicted")
	}
	st, now, err := s.Inspect(context.Background(), key(0), l)
	if err != nil {
		t.Fatal(err)
	}
	if st.Count < 3 {
		t.Errorf("Inspect of an evicted key: count %d, want at least the 3 hits it took", st.Count)
	}
	got, _ := l.Evaluate(st, now.UnixMicro(), 0)
	if want := apply(key(0), 0); got != want {
		t.Errorf("Evaluate(inspected state) = %+v, but the store answers %+v", got, want)
	}
}
