package main

import (
	"context"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// newHealth returns the one health verdict (internal/admin), which gRPC
// health of names, /readyz and /healthcheck read: not serving while the
// rules source waits for its first rules (xDS without
// --force-start-without-rules), while no rule is loaded with
// --health-requires-rules, and while Redis refuses the sidecar's
// configuration with --health-requires-redis-config (on by default run
// as ratelimit); serving otherwise, until shutdown. ctx is serve's: once
// it ends, the verdict is shutting down.
func newHealth(ctx context.Context, c *settings, rules func() *limits.Ruleset, src ruleSource, st *sidecarStore, names []string) *admin.Health {
	o := admin.HealthOptions{
		Stopping:           ctx.Done(),
		Rules:              rules,
		RequireRules:       c.healthRequiresRules,
		Refused:            st.refused,
		RequireStoreConfig: c.healthRequiresRedisConfig,
		RefusalChanged:     st.refusalChanged,
		Probe:              st.ready,
		Names:              names,
	}
	o.RulesReady, o.RulesWaiting = pending(src)
	return admin.NewHealth(o)
}
