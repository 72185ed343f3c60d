// Package admin serves the sidecar's admin and debug HTTP endpoints:
// the probes (/healthz, /readyz, /healthcheck), /debug/config,
// /debug/counters and its reset, and the debug port's index and
// /rlconfig; and it keeps the one health verdict (Health) that gRPC
// health and the probes read. Each is built from Options, the parts it reads as narrow
// funcs and interfaces, never from the flags nor from a store's or a
// protocol's package, and is safe for concurrent use.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ErrMisconfigured marks a store's readiness error that waiting does not
// end: Redis refuses the sidecar's configuration. /readyz then says not
// ready even where failure modes could answer.
var ErrMisconfigured = errors.New("redis refuses the sidecar's configuration")

// Options are what the endpoints read. The fields marked required must
// be set; the others may be left zero.
type Options struct {
	// Health is the verdict /healthcheck answers and /readyz starts
	// from. Required.
	Health *Health
	// Rules returns the rules in use. Required.
	Rules func() *limits.Ruleset
	// Status returns the rule source's status, for /debug/config.
	// Required.
	Status func() config.ReloadStatus
	// StoreReady reports whether the store can decide now; an error
	// wrapping ErrMisconfigured is one waiting does not end. Required.
	StoreReady func(context.Context) error
	// FailingDomains lists the domains in use whose failure mode is
	// error: while the store is unavailable they cannot be answered.
	// Required.
	FailingDomains func() []string
	// Counters are what /debug/counters reads; Debug serves it only
	// when Counters.Rules is set.
	Counters CountersOptions
}

// Admin holds the endpoints of one Options.
type Admin struct {
	o      Options
	config *ConfigPage
}

// New returns the endpoints of o.
func New(o Options) *Admin {
	return &Admin{o: o, config: NewConfigPage(ConfigOptions{Status: o.Status, Rules: o.Rules})}
}

// Health adds the probes to mux: /healthz, /readyz and /healthcheck.
func (a *Admin) Health(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /healthcheck", a.healthcheck)
}

// Debug adds /debug/config and, if Options.Counters has its rules,
// /debug/counters and POST /debug/counters/reset to mux.
func (a *Admin) Debug(mux *http.ServeMux) {
	mux.Handle("GET /debug/config", a.config)
	if a.o.Counters.Rules == nil {
		return
	}
	cs := &counters{a.o.Counters}
	mux.HandleFunc("GET /debug/counters", cs.read)
	mux.HandleFunc("POST /debug/counters/reset", cs.reset)
}

// DebugPort returns the debug listener's mux: an index at /, /rlconfig
// and, with config, /debug/config.
func (a *Admin) DebugPort(config bool) *http.ServeMux {
	endpoints := map[string]string{
		"/rlconfig": "the rules in use, one line per limit, as envoyproxy/ratelimit prints them",
	}
	if config {
		endpoints["/debug/config"] = "the rules in use as JSON, with their files and reload status"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		paths := make([]string, 0, len(endpoints))
		for p := range endpoints {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(w, "%s: %s\n", p, endpoints[p])
		}
	})
	mux.Handle("GET /rlconfig", RLConfig(a.o.Rules))
	if config {
		mux.Handle("GET /debug/config", a.config)
	}
	return mux
}

// readyz answers /readyz: not ready while the verdict says the sidecar
// does not serve; else ready when the store can decide, or when the
// failure mode of every domain in use can answer in its place. Domains
// with failure mode error cannot: their requests fail while the store is
// unavailable, so the sidecar is not ready then. Nor is it while Redis
// refuses its configuration (ErrMisconfigured), which waiting does not
// fix. Unlike the verdict, /readyz asks the store on every call.
func (a *Admin) readyz(w http.ResponseWriter, r *http.Request) {
	if v := a.o.Health.Verdict(); !v.Serving() {
		http.Error(w, v.Reason, http.StatusServiceUnavailable)
		return
	}
	err := a.o.StoreReady(r.Context())
	if err == nil {
		fmt.Fprintln(w, "ok")
		return
	}
	if errors.Is(err, ErrMisconfigured) {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if failing := a.o.FailingDomains(); len(failing) > 0 {
		http.Error(w, fmt.Sprintf("store unavailable: %v; failure mode error for domains %s", err, strings.Join(failing, ", ")), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok (store unavailable; every domain is served by its failure mode)")
}

// healthcheck answers GET /healthcheck as envoyproxy/ratelimit does, from
// the verdict as gRPC health has it: 200 "OK" while the sidecar serves,
// 500 with the reason while it does not (shutting down, no rules with
// RequireRules, Redis refusing the configuration with
// RequireStoreConfig), except 503 while the rule source waits for its
// first rules.
func (a *Admin) healthcheck(w http.ResponseWriter, _ *http.Request) {
	switch v := a.o.Health.Verdict(); v.Cause {
	case CauseNone:
		io.WriteString(w, "OK") //nolint:errcheck // the client went away
	case CauseWaiting:
		http.Error(w, v.Reason, http.StatusServiceUnavailable)
	default:
		http.Error(w, v.Reason, http.StatusInternalServerError)
	}
}
