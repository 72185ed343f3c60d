// Package rlqs serves Envoy's Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3): Envoy's rate_limit_quota filter
// decides requests locally and reports usage on one stream, and the
// server assigns each bucket quota that it has taken from the shared
// store, so that a fleet of Envoys never admits more than a limit.
//
// A bucket id's entries, sorted by key, form a descriptor that is matched
// against the same rules as an RLS request (see docs/rlqs.md). Quota is
// assigned for fixed and sliding windows, token buckets and leaky
// buckets; a bucket whose rule cannot be served is answered by its
// domain's failure mode (open: ALLOW_ALL, otherwise DENY_ALL) while Envoy
// uses it, and abandoned at the first report without requests.
//
// The package sits beside pkg/envoy and shares nothing with it but
// pkg/limits.
package rlqs
