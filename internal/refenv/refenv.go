// Package refenv reads the environment onto the sidecar's flags: each
// flag's RLS_ variable, and below those the variables of
// envoyproxy/ratelimit (the reference), each mapped onto a flag (with its
// meaning translated where ours differs) or onto one of the few settings
// without a flag (Applied.Settings), honoured as it is, or refused with a
// reason. Load applies both to a flag set whose command line is parsed;
// its Report is what the start log (internal/envlog) shows. Standard
// library only, but for internal/suggest's "did you mean".
//
// The files: vars.go is every variable of the reference, with its
// default; mappings.go the table of what each maps onto, with the
// mappings of its Redis, xDS and stats variables in redis.go, xds.go and
// stats.go; refusals.go what is not honoured, and why; values.go how a
// variable's value is read; apply.go Apply, the table applied; env.go
// Load, with the RLS_ variables; report.go the start report.
package refenv

import "path/filepath"

// The environment of envoyproxy/ratelimit (the reference), which Envoy
// Gateway's rate-limit deployment and Istio's sample start it with, and no
// flags. Each of the reference's variables is mapped onto our flags (with
// its meaning translated where ours differs), honoured as it is, or
// refused with a reason, named in one warning at start.
//
// Precedence, for each of our flags: the command line, then its RLS_
// variable, then the reference's variables, then the default. Run as
// Name (the reference image's /bin/ratelimit), the default is the
// reference's, for the settings whose default describes the deployment
// (listeners, rule files, Redis, ...); run under any other name, ours.

// Name is the name the reference's image runs it as: /bin/ratelimit.
const Name = "ratelimit"

// IsRefMode reports whether a program run as argv0 (os.Args[0]) runs in
// the reference's place.
func IsRefMode(argv0 string) bool { return filepath.Base(argv0) == Name }
