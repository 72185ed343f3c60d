package sources

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// RuleSource is where rules come from: rule files (*config.Reloader) or
// an xDS server (*xds.RuleSource). Watch keeps them up to date until its
// context ends; Reload answers SIGHUP; Ready is closed once the source
// has its first rules (rule files have them from the start), and
// Awaiting says what it waits for until then.
type RuleSource interface {
	Status() config.ReloadStatus
	Watch(ctx context.Context) error
	Reload() (bool, error)
	Ready() <-chan struct{}
	Awaiting() string
}

// Open builds a rule source that writes its rules to target and reports
// each reload or push to onApply.
type Open func(target Target, onApply func(config.ReloadStatus, error)) (RuleSource, error)

// Part is one of a Multi's sources.
type Part struct {
	Name string
	RuleSource
}

// Multi is several rule sources as one: each keeps its share of the
// target's rules (a Combiner), it is ready once every one is, and its
// status is theirs together, with the domains refused as its error.
// Add every source before Watch.
type Multi struct {
	parts   []Part
	log     *zap.Logger
	comb    *Combiner
	target  Target
	onApply func(config.ReloadStatus, error)
	ready   chan struct{}
	once    sync.Once // closes ready

	mu     sync.Mutex // guards status
	status map[string]config.ReloadStatus
}

// NewMulti returns a rule source of no sources yet for target. Every
// source's reloads and pushes are reported to onApply with the status of
// them all.
func NewMulti(target Target, log *zap.Logger, onApply func(config.ReloadStatus, error)) *Multi {
	return &Multi{log: log, comb: New(target, log), target: target, onApply: onApply,
		ready: make(chan struct{}), status: map[string]config.ReloadStatus{}}
}

// Add adds the source named name, whose rules are rs until it sets
// others, opened by open on its share of the rules.
func (mr *Multi) Add(name string, rs *limits.Ruleset, open Open) (RuleSource, error) {
	src, err := mr.comb.Add(name, rs)
	if err != nil {
		return nil, err
	}
	s, err := open(src, mr.reported(name))
	if err != nil {
		return nil, err
	}
	st := s.Status() // before mr.mu: the source takes its own lock
	mr.mu.Lock()
	mr.parts = append(mr.parts, Part{name, s})
	mr.status[name] = st
	mr.mu.Unlock()
	return s, nil
}

// Start marks Multi ready if every source added has its rules already:
// call it once all are added.
func (mr *Multi) Start() {
	if mr.pending() == nil {
		mr.markReady()
	}
}

// Parts returns the sources, in the order they were added.
func (mr *Multi) Parts() []Part { return mr.parts }

// Refused counts the domains of the source named name that are refused.
func (mr *Multi) Refused(name string) int { return mr.comb.Refused(name) }

// reported returns the OnApply of the source named name: it keeps the
// source's status and reports everyone's, with the source's error named
// by it. A source calls it with its own lock held, so it must not ask the
// source for its status.
func (mr *Multi) reported(name string) func(config.ReloadStatus, error) {
	return func(st config.ReloadStatus, err error) {
		mr.mu.Lock()
		mr.status[name] = st
		mr.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("rule source %s: %w", name, err)
		}
		mr.onApply(mr.Status(), err)
	}
}

// Status is every source's status together: the target's rules, the
// latest load and attempt, the sum of reloads, and as the error each
// source's standing error and each domain refused.
func (mr *Multi) Status() config.ReloadStatus {
	rs := mr.target.Rules()
	st := config.ReloadStatus{Checksum: rs.Checksum, Files: rs.Files}
	var errs []error
	mr.mu.Lock()
	for _, p := range mr.parts {
		s := mr.status[p.Name]
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
			errs = append(errs, fmt.Errorf("rule source %s: %w", p.Name, s.LastError))
		}
	}
	mr.mu.Unlock()
	st.LastError = errors.Join(append(errs, mr.comb.Err())...)
	return st
}

// Watch runs every source until ctx ends, and closes Ready once each has
// its first rules. A source whose watch fails is logged at once, as the
// sidecar logs the watch of a single source, and the others keep theirs;
// Watch itself then returns nil.
func (mr *Multi) Watch(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, p := range mr.parts {
		wg.Go(func() {
			if err := p.Watch(ctx); err != nil {
				mr.log.Error("rule source watch failed; reload with SIGHUP", zap.String("source", p.Name), zap.Error(err))
			}
		})
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

func (mr *Multi) markReady() { mr.once.Do(func() { close(mr.ready) }) }

// Reload reloads every source: SIGHUP.
func (mr *Multi) Reload() (bool, error) {
	var changed bool
	var errs []error
	for _, p := range mr.parts {
		ok, err := p.Reload()
		changed = changed || ok
		if err != nil {
			errs = append(errs, fmt.Errorf("rule source %s: %w", p.Name, err))
		}
	}
	return changed, errors.Join(errs...)
}

// Ready is closed once every source has its first rules.
func (mr *Multi) Ready() <-chan struct{} { return mr.ready }

// Awaiting says which sources have no rules yet.
func (mr *Multi) Awaiting() string {
	var waiting []string
	for _, p := range mr.pending() {
		waiting = append(waiting, "rule source "+p.Name+": "+p.Awaiting())
	}
	return strings.Join(waiting, "; ")
}

// pending returns the sources without rules yet.
func (mr *Multi) pending() []Part {
	var out []Part
	for _, p := range mr.parts {
		select {
		case <-p.Ready():
		default:
			out = append(out, p)
		}
	}
	return out
}
