// Package limits is the core of the sidecar: rate limits and their
// algorithms, rules and how request descriptors match them, the Engine
// that decides requests, and the Store contract that backends implement.
//
// The request path reads top to bottom: a protocol adapter (pkg/envoy)
// turns the wire request into a Request; Engine.Decide matches every
// descriptor against the Ruleset in use, builds one Batch of checks and
// hands it to a Store, which decides the whole batch atomically: a
// request is admitted only if every enforced limit admits it, and a
// rejected request consumes nothing anywhere. quota_mode descriptors are
// enforced as one group: they reject a request only when every one of
// them is over (see Check.Group). The adapter turns the Decision back
// into a response.
//
// Every algorithm's semantics live in this package, in Limit.Evaluate,
// with time passed in explicitly. The backends are packages of their own:
// pkg/memory calls Evaluate, and pkg/redis's Lua script mirrors it;
// internal/storetest holds the one table of cases both must pass.
// Rulesets are built by NewRuleset, normally from rule files by
// pkg/config, and are immutable. Store middleware (circuit breaker,
// timing, the deny cache and leases) is in pkg/store.
//
// This package imports no YAML, logging, file watching, gRPC or Redis
// code.
package limits
