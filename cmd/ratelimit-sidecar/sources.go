package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/sources"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// The names of the first rule source with --xds-source: the rule files,
// or the xDS server of --xds-server.
const (
	filesSource = "files"
	xdsSource   = "xds"
)

// sourceList is --xds-source: repeatable, and one value may hold several
// separated by ';', as RLS_XDS_SOURCE does.
type sourceList []xds.Source

func (l *sourceList) String() string {
	if l == nil {
		return ""
	}
	texts := make([]string, len(*l))
	for i, s := range *l {
		texts[i] = s.String()
	}
	return strings.Join(texts, ";")
}

func (l *sourceList) Set(s string) error {
	more, err := xds.ParseSources(s)
	if err != nil {
		return err
	}
	*l = append(*l, more...)
	return nil
}

// check refuses a name given twice, or that of the first source.
func (l sourceList) check() error {
	seen := map[string]bool{filesSource: true, xdsSource: true}
	for _, s := range l {
		if seen[s.Name] {
			return fmt.Errorf("--xds-source: name %q: taken (%s and %s name the first source)", s.Name, filesSource, xdsSource)
		}
		seen[s.Name] = true
	}
	return nil
}

// namedSource is one of several rule sources.
type namedSource struct {
	name string
	ruleSource
	xds *xds.Client // nil for rule files
}

// multiRules is several rule sources as one: each keeps its share of the
// engine's rules (pkg/sources), it is ready once every one is, and its
// status is theirs together, with the domains refused as its error.
type multiRules struct {
	parts  []namedSource
	log    *zap.Logger
	comb   *sources.Combiner
	engine *limits.Engine
	ready  chan struct{}
	once   sync.Once // closes ready

	mu     sync.Mutex // guards status
	status map[string]config.ReloadStatus
}

// combinedRules returns c's rule files or first xDS server, and each
// --xds-source, as one rule source for engine. Every source's reloads
// and pushes are reported to onApply with the status of them all.
func combinedRules(c *settings, opts config.Options, engine *limits.Engine, log *zap.Logger, m *metrics.Metrics, onApply func(config.ReloadStatus, error)) (*multiRules, error) {
	mr := &multiRules{log: log, comb: sources.New(engine, log), engine: engine, ready: make(chan struct{}), status: map[string]config.ReloadStatus{}}
	add := func(name string, rs *limits.Ruleset) (*sources.Source, func(config.ReloadStatus, error), error) {
		src, err := mr.comb.Add(name, rs)
		return src, mr.reported(name, onApply), err
	}
	if c.xds.enabled {
		src, report, err := add(xdsSource, limits.NewRuleset(nil, nil, engine.Rules().Checksum))
		if err != nil {
			return nil, err
		}
		x, err := newXDSRules(c, src, log.With(zap.String("source", xdsSource)), report)
		if err != nil {
			return nil, err
		}
		mr.parts = append(mr.parts, namedSource{xdsSource, x, x.Client})
	} else {
		src, report, err := add(filesSource, engine.Rules())
		if err != nil {
			return nil, err
		}
		mr.parts = append(mr.parts, namedSource{filesSource, newReloader(c, opts, src, log.With(zap.String("source", filesSource)), report), nil})
	}
	for _, s := range c.xds.sources {
		src, report, err := add(s.Name, limits.NewRuleset(nil, nil, config.Checksum(nil)))
		if err != nil {
			return nil, err
		}
		o := xdsOptions(c, report)
		o.Server, o.NodeID, o.TLS = s.Server, s.NodeID, s.TLS
		o.NodeMetadata, o.Headers, o.OverlayPath = nil, nil, "" // the first server's alone
		o.StartWithoutRules = o.StartWithoutRules || s.ForceStart
		// A push of nothing empties this source's domains only, and is
		// how AI Gateway's controller says its last QuotaPolicy went:
		// refusing it would keep a deleted quota in force.
		o.AllowEmpty = true
		client, err := xds.New(src, log.With(zap.String("source", s.Name)), o)
		if err != nil {
			return nil, fmt.Errorf("--xds-source %s: %w", s.Name, err)
		}
		mr.parts = append(mr.parts, namedSource{s.Name, &xdsRules{Client: client, log: log, server: s.Server}, client})
	}
	for _, p := range mr.parts {
		mr.status[p.name] = p.Status()
	}
	if mr.pending() == nil {
		mr.markReady()
	}
	m.Sources(mr.metricsState)
	// The engine's rules are now every source's together, whose checksum
	// is not the rule files' that serve recorded.
	m.Loaded(engine.Rules().Checksum, time.Now())
	return mr, nil
}

// reported returns the OnApply of the source named name: it keeps the
// source's status and reports everyone's, with the source's error named
// by it. A source calls it with its own lock held, so it must not ask the
// source for its status.
func (mr *multiRules) reported(name string, onApply func(config.ReloadStatus, error)) func(config.ReloadStatus, error) {
	return func(st config.ReloadStatus, err error) {
		mr.mu.Lock()
		mr.status[name] = st
		mr.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("rule source %s: %w", name, err)
		}
		onApply(mr.Status(), err)
	}
}

// Status is every source's status together: the engine's rules, the
// latest load and attempt, the sum of reloads, and as the error each
// source's standing error and each domain refused.
func (mr *multiRules) Status() config.ReloadStatus {
	rs := mr.engine.Rules()
	st := config.ReloadStatus{Checksum: rs.Checksum, Files: rs.Files}
	var errs []error
	mr.mu.Lock()
	for _, p := range mr.parts {
		s := mr.status[p.name]
		if s.LoadedAt.After(st.LoadedAt) {
			st.LoadedAt = s.LoadedAt
		}
		if s.LastAttempt.After(st.LastAttempt) {
			st.LastAttempt = s.LastAttempt
		}
		st.Successes += s.Successes
		st.Failures += s.Failures
		st.Reads += s.Reads
		if s.LastError != nil {
			errs = append(errs, fmt.Errorf("rule source %s: %w", p.name, s.LastError))
		}
	}
	mr.mu.Unlock()
	st.LastError = errors.Join(append(errs, mr.comb.Err())...)
	return st
}

// Watch runs every source until ctx ends, and closes Ready once each has
// its first rules. A source whose watch fails is logged at once, as
// serve logs the watch of a single source, and the others keep theirs;
// Watch itself then returns nil.
func (mr *multiRules) Watch(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, p := range mr.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Watch(ctx); err != nil {
				mr.log.Error("rule source watch failed; reload with SIGHUP", zap.String("source", p.name), zap.Error(err))
			}
		}()
	}
	for _, p := range mr.parts {
		select {
		case <-p.Ready():
		case <-ctx.Done():
		}
	}
	if ctx.Err() == nil {
		mr.markReady()
	}
	wg.Wait()
	return nil
}

func (mr *multiRules) markReady() { mr.once.Do(func() { close(mr.ready) }) }

// Reload reloads every source: SIGHUP.
func (mr *multiRules) Reload() (bool, error) {
	var changed bool
	var errs []error
	for _, p := range mr.parts {
		ok, err := p.Reload()
		changed = changed || ok
		if err != nil {
			errs = append(errs, fmt.Errorf("rule source %s: %w", p.name, err))
		}
	}
	return changed, errors.Join(errs...)
}

// Ready is closed once every source has its first rules.
func (mr *multiRules) Ready() <-chan struct{} { return mr.ready }

// Awaiting says which sources have no rules yet.
func (mr *multiRules) Awaiting() string {
	var waiting []string
	for _, p := range mr.pending() {
		waiting = append(waiting, "rule source "+p.name+": "+p.Awaiting())
	}
	return strings.Join(waiting, "; ")
}

// pending returns the sources without rules yet.
func (mr *multiRules) pending() []namedSource {
	var out []namedSource
	for _, p := range mr.parts {
		select {
		case <-p.Ready():
		default:
			out = append(out, p)
		}
	}
	return out
}

// metricsState is every source's state for the metrics.
func (mr *multiRules) metricsState() []metrics.SourceState {
	out := make([]metrics.SourceState, len(mr.parts))
	for i, p := range mr.parts {
		out[i] = metrics.SourceState{Name: p.name, Refused: mr.comb.Refused(p.name)}
		if p.xds != nil {
			st := p.xds.State()
			out[i].XDS = &metrics.XDSState{Connected: st.Connected, LastPush: st.LastPush, Applied: st.Applied, OverlayUnmatched: st.OverlayUnmatched}
		}
	}
	return out
}
