// Package limits compiles rate-limit rules, matches request descriptors
// against them and decides requests through a Store.
//
// The flow is: Load or Parse rule files into a *Ruleset (immutable, safe to
// share), publish it to an Engine, and call Engine.Decide for each request.
// The Engine matches every descriptor, builds one Batch of checks and hands it
// to a Store, which decides the whole batch atomically: a request is admitted
// only if every enforced limit admits it, and a rejected request consumes
// nothing anywhere.
//
// Every algorithm's semantics live in this package (see Limit.evaluate) with
// time passed in explicitly; the memory store here and the Redis store's Lua
// script implement the same rules, and internal/storetest holds the one table
// of cases both must pass.
package limits
