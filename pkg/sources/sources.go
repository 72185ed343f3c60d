// Package sources lets several rule sources (rule files, xDS servers)
// decide in one engine: each source writes its own rules to a Source, and
// the Combiner gives the engine one Ruleset of them all.
//
// Each domain belongs to one source. The first source to hold a domain
// keeps it for as long as its rules hold it; another source's rules for
// that domain are refused (logged at Error, and listed by Conflicts) while
// the rest of its domains apply. Once the holder drops the domain, the
// first source in the order they were added that still holds it takes it.
// Rules of two sources are never merged.
package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Target holds the rules in use: a *limits.Engine is one.
type Target interface {
	Rules() *limits.Ruleset
	SetRules(*limits.Ruleset)
}

// Conflict is a domain that two sources hold: Holder's rules for it are
// in use, Refused's are not.
type Conflict struct {
	Domain, Holder, Refused string
}

func (c Conflict) Error() string {
	return fmt.Sprintf("rule source %s: domain %q refused: rule source %s holds it", c.Refused, c.Domain, c.Holder)
}

// Combiner combines the rules of its sources into its target's. Its
// methods, and its sources', are safe for concurrent use.
type Combiner struct {
	target Target
	log    *zap.Logger

	mu        sync.Mutex // serializes combining; guards the rest
	sources   []*Source
	owner     map[string]*Source // domain → the source whose rules for it are in use
	conflicts []Conflict
}

// New returns a combiner of no sources yet for target, whose rules it
// replaces as soon as a source is added.
func New(target Target, log *zap.Logger) *Combiner {
	return &Combiner{target: target, log: log, owner: map[string]*Source{}}
}

// Source is one source's share of the rules: it fits what pkg/config's
// Reloader and pkg/xds's Client write their rules to.
type Source struct {
	c     *Combiner
	name  string
	rules *limits.Ruleset // guarded by c.mu
}

// Add adds a source named name, whose rules are rs until it sets others.
// Names must differ.
func (c *Combiner) Add(name string, rs *limits.Ruleset) (*Source, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sources {
		if s.name == name {
			return nil, fmt.Errorf("rule source %q: named twice", name)
		}
	}
	s := &Source{c: c, name: name, rules: rs}
	c.sources = append(c.sources, s)
	c.combine()
	return s, nil
}

// Name returns the source's name.
func (s *Source) Name() string { return s.name }

// Rules returns the source's own rules: those it last set, whether or not
// all its domains are in use.
func (s *Source) Rules() *limits.Ruleset {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.rules
}

// SetRules makes rs the source's rules and the target's rules those of
// every source, each domain its holder's.
func (s *Source) SetRules(rs *limits.Ruleset) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.rules = rs
	s.c.combine()
}

// Conflicts returns the domains refused now, by source in the order they
// were added, then by domain.
func (c *Combiner) Conflicts() []Conflict {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.conflicts)
}

// Err returns every conflict as one error, nil if there is none.
func (c *Combiner) Err() error {
	var errs []error
	for _, cf := range c.Conflicts() {
		errs = append(errs, cf)
	}
	return errors.Join(errs...)
}

// Refused counts the domains of the source named name that are refused.
func (c *Combiner) Refused(name string) int {
	n := 0
	for _, cf := range c.Conflicts() {
		if cf.Refused == name {
			n++
		}
	}
	return n
}

// combine sets the target's rules from the sources'. Requires c.mu held.
func (c *Combiner) combine() {
	for d, s := range c.owner {
		if !s.rules.HasDomain(d) {
			delete(c.owner, d)
		}
	}
	from := map[string]*limits.Ruleset{}
	var conflicts []Conflict
	var files []string
	h := sha256.New()
	for _, s := range c.sources {
		files = append(files, s.rules.Files...)
		fmt.Fprintf(h, "%d:%s%d:%s", len(s.name), s.name, len(s.rules.Checksum), s.rules.Checksum)
		for _, d := range s.rules.Domains() {
			holder := c.owner[d]
			if holder == nil {
				holder = s
				c.owner[d] = s
			}
			if holder == s {
				from[d] = s.rules
				continue
			}
			conflicts = append(conflicts, Conflict{Domain: d, Holder: holder.name, Refused: s.name})
			fmt.Fprintf(h, "!%d:%s", len(d), d)
		}
	}
	c.report(conflicts)
	if len(c.sources) == 1 {
		// One source: its rules as they are, checksum and all.
		c.target.SetRules(c.sources[0].rules)
		return
	}
	c.target.SetRules(limits.Join(from, files, hex.EncodeToString(h.Sum(nil))))
}

// report logs the conflicts that are new at Error, and those that ended
// at Info, and keeps conflicts. Requires c.mu held.
func (c *Combiner) report(conflicts []Conflict) {
	for _, cf := range conflicts {
		if !slices.Contains(c.conflicts, cf) {
			c.log.Error("rule source refused for a domain another rule source holds; the holder's rules for it stay in use",
				zap.String("domain", cf.Domain), zap.String("source", cf.Refused), zap.String("holder", cf.Holder))
		}
	}
	for _, cf := range c.conflicts {
		if !slices.Contains(conflicts, cf) {
			c.log.Info("rule source conflict over a domain ended",
				zap.String("domain", cf.Domain), zap.String("source", cf.Refused), zap.String("holder", cf.Holder))
		}
	}
	c.conflicts = conflicts
}
