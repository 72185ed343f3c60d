package main

import (
	"context"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// newHealth returns the one health verdict (internal/admin) of o, whose
// requirements the --health-requires-* flags set, made of the rules, the
// rule source src, the store and serve's ctx (once it ends, the verdict
// is shutting down), followed by the gRPC health service names.
func newHealth(ctx context.Context, o admin.HealthOptions, rules func() *limits.Ruleset, src ruleSource, st *sidecarStore, names []string) *admin.Health {
	o.Stopping, o.Rules, o.Names = ctx.Done(), rules, names
	o.Refused, o.RefusalChanged, o.Probe = st.refused, st.refusalChanged, st.ready
	o.RulesReady, o.RulesWaiting = pending(src)
	return admin.NewHealth(o)
}
