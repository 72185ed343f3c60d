package main

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/sources"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// ruleSource is where the rules in use come from: rule files, an xDS
// server, or several of them (sources.Multi).
type ruleSource = sources.RuleSource

// rulesOptions are the flags of the rules: their files, or the xDS
// servers that push them. The xDS ones' reconnect waits and message
// bound are set only by the reference's XDS_CLIENT_* (setFlagless), with
// envoyproxy/ratelimit's defaults.
type rulesOptions struct {
	path     string         // --config
	debounce time.Duration  // --reload-debounce
	config   config.Options // --merge-domains, --allow-empty-rules, --calendar-months
	xds      xds.SourceOptions
}

// startRules returns the rules to start with: the rule files' (read
// with opts), or none for --config-type xds, whose rules arrive with its
// first push: that is starting without rules on purpose.
func startRules(o rulesOptions, opts config.Options) (*limits.Ruleset, error) {
	if o.xds.Enabled {
		return limits.NewRuleset(nil, nil, config.Checksum(nil)), nil
	}
	return config.Load(o.path, opts)
}

// rulesFrom returns the rule source of o: its rule files' reloader or
// an xDS client applying pushes to engine, reported to onApply as reloads
// are; with --xds-source, those and every more xDS server, combined.
func rulesFrom(o rulesOptions, engine *limits.Engine, log *zap.Logger, m *metrics.Metrics, onApply func(config.ReloadStatus, error)) (ruleSource, error) {
	if len(o.xds.Sources) > 0 {
		return combinedRules(o, engine, log, m, onApply)
	}
	if !o.xds.Enabled {
		return o.reloader(engine, log, onApply), nil
	}
	x, err := o.xdsRules(engine, log, onApply)
	if err != nil {
		return nil, err
	}
	m.XDS(func() metrics.XDSState { return xdsState(x.State()) })
	return x, nil
}

// combinedRules returns o's rule files or first xDS server, and each
// --xds-source, as one rule source for engine.
func combinedRules(o rulesOptions, engine *limits.Engine, log *zap.Logger, m *metrics.Metrics, onApply func(config.ReloadStatus, error)) (*sources.Multi, error) {
	mr := sources.NewMulti(engine, log, onApply)
	named := func(name string) *zap.Logger { return log.With(zap.String("source", name)) }
	if o.xds.Enabled {
		if _, err := mr.Add(xds.FirstSource, limits.NewRuleset(nil, nil, engine.Rules().Checksum), func(t sources.Target, report func(config.ReloadStatus, error)) (sources.RuleSource, error) {
			return o.xdsRules(t, named(xds.FirstSource), report)
		}); err != nil {
			return nil, err
		}
	} else if _, err := mr.Add(xds.FilesSource, engine.Rules(), func(t sources.Target, report func(config.ReloadStatus, error)) (sources.RuleSource, error) {
		return o.reloader(t, named(xds.FilesSource), report), nil
	}); err != nil {
		return nil, err
	}
	for _, s := range o.xds.Sources {
		if _, err := mr.Add(s.Name, limits.NewRuleset(nil, nil, config.Checksum(nil)), func(t sources.Target, report func(config.ReloadStatus, error)) (sources.RuleSource, error) {
			x, err := xds.NewRuleSource(t, named(s.Name), o.xdsOptions(report).SourceOptions(s))
			if err != nil {
				return nil, fmt.Errorf("--xds-source %s: %w", s.Name, err)
			}
			return x, nil
		}); err != nil {
			return nil, err
		}
	}
	mr.Start()
	m.Sources(func() []metrics.SourceState { return sourcesState(mr) })
	// The engine's rules are now every source's together, whose checksum
	// is not the rule files' that serve recorded.
	m.Loaded(engine.Rules().Checksum, time.Now())
	return mr, nil
}

// reloader returns the reloader of o's rule files, keeping target's
// rules theirs.
func (o rulesOptions) reloader(target config.Target, log *zap.Logger, onApply func(config.ReloadStatus, error)) *config.Reloader {
	return config.NewReloader(o.path, target, log, config.ReloaderOptions{
		Options:  o.config,
		Debounce: o.debounce,
		OnReload: onApply,
	})
}

// xdsOptions are the options of o's first xDS server (--xds-server).
func (o rulesOptions) xdsOptions(onApply func(config.ReloadStatus, error)) xds.Options {
	x := o.xds.Options
	x.Rules = config.Options{MergeDomains: o.config.MergeDomains, CalendarMonths: o.config.CalendarMonths}
	x.AllowEmpty = o.config.AllowEmpty
	x.OnApply = onApply
	x.OverlayDebounce = o.debounce
	return x
}

// xdsRules returns the client of o's first xDS server, keeping target's
// rules its pushes'.
func (o rulesOptions) xdsRules(target xds.Target, log *zap.Logger, onApply func(config.ReloadStatus, error)) (*xds.RuleSource, error) {
	x, err := xds.NewRuleSource(target, log, o.xdsOptions(onApply))
	if err != nil {
		return nil, fmt.Errorf("--config-type xds: %w", err)
	}
	return x, nil
}

// xdsState is an xDS client's state for the metrics.
func xdsState(st xds.State) metrics.XDSState {
	return metrics.XDSState{Connected: st.Connected, LastPush: st.LastPush, Applied: st.Applied, OverlayUnmatched: st.OverlayUnmatched}
}

// sourcesState is every source's state for the metrics.
func sourcesState(mr *sources.Multi) []metrics.SourceState {
	parts := mr.Parts()
	out := make([]metrics.SourceState, len(parts))
	for i, p := range parts {
		out[i] = metrics.SourceState{Name: p.Name, Refused: mr.Refused(p.Name)}
		if x, ok := p.RuleSource.(*xds.RuleSource); ok {
			st := xdsState(x.State())
			out[i].XDS = &st
		}
	}
	return out
}

// pending returns a channel closed once src has rules, and the health
// answer until then: what it waits for now, since several sources get
// their rules one by one.
func pending(src ruleSource) (<-chan struct{}, func() string) {
	return src.Ready(), func() string { return "waiting for " + src.Awaiting() }
}
