package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64 // total time Redis spent in the command, nested calls of scripts included
}

// CommandStats returns INFO commandstats by lower-case command name,
// summed over the masters of a cluster. Redis counts a command once it
// has run, so the INFO that asks is not among them; the next one counts
// it.
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]CommandStat, error) {
	stats := map[string]CommandStat{}
	var mu sync.Mutex
	add := func(info string) error {
		mu.Lock()
		defer mu.Unlock()
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			name, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd {
				continue
			}
			st := stats[name]
			for field := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(field, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("INFO commandstats %q: %w", line, err)
				}
				if k == "calls" {
					st.Calls += n
				} else {
					st.Usec += n
				}
			}
			stats[name] = st
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.Info(ctx, "commandstats").Result()
			if err != nil {
				return err
			}
			return add(info)
		})
		return stats, err
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return stats, add(info)
}

// CommandCalls returns the calls of each command, as CommandStats counts
// them.
func CommandCalls(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	stats, err := CommandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	calls := make(map[string]int64, len(stats))
	for name, st := range stats {
		calls[name] = st.Calls
	}
	return calls, nil
}
