package config

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// limitList parses a rate_limits list into r.Limits.
func (p *parser) limitList(r *limits.Rule, n *yaml.Node, path string) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of rate limits, got %s", kindName(n))
		return
	}
	// ids finds a repeated window in one lookup, not a scan of the list
	// (a list of N limits would cost N^2).
	ids := make(map[string]bool, len(n.Content))
	for _, l := range r.Limits {
		ids[l.ID()] = true
	}
	for i, item := range n.Content {
		item = deref(item)
		ip := fmt.Sprintf("%s[%d]", path, i)
		l := p.limit(r, item, ip, false)
		if l == nil {
			continue
		}
		if ids[l.ID()] {
			p.errorf(item, ip, "same algorithm and window as another limit of this descriptor (%s); they would share one counter", l.ID())
		}
		ids[l.ID()] = true
		r.Limits = append(r.Limits, l)
	}
}

// limit parses a rate_limit mapping. single is false inside rate_limits.
func (p *parser) limit(r *limits.Rule, n *yaml.Node, path string, single bool) *limits.Limit {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a rate limit mapping, got %s", kindName(n))
		return nil
	}
	l := &limits.Limit{Shadow: r.ShadowMode, Quota: r.QuotaMode, Charge: r.Charge}
	nerr := len(p.errs)
	ln := p.limitFields(l, n, path)
	for _, name := range l.Replaces {
		if name != "" && name == l.Name {
			p.errorf(ln.repl, join(path, "replaces"), "a limit cannot replace itself (%q)", name)
		}
	}
	if l.Unlimited {
		p.onlyCounted(n, path, single, map[string]*yaml.Node{"unit": ln.unit, "algorithm": ln.alg, "burst": ln.burst, "unit_multiplier": ln.mult, "lease": ln.lease, "release_after": ln.release})
		if len(p.errs) > nerr {
			return nil
		}
		return l
	}
	p.checkCounted(l, ln, n, path)
	if len(p.errs) > nerr {
		return nil
	}
	c, err := limits.NewLimit(l.Algorithm, l.Requests, l.Unit, l.Multiplier, l.Burst)
	if err != nil {
		p.errorf(n, path, "%v", err)
		return nil
	}
	c.Name, c.Replaces, c.Shadow, c.Quota, c.Lease, c.Charge = l.Name, l.Replaces, l.Shadow, l.Quota, l.Lease, l.Charge
	c.ReleaseAfter = l.ReleaseAfter
	return p.calendar(c, ln, path)
}

// limitNodes are the fields of a rate_limit mapping that later checks
// name in their errors; unit is read as text first.
type limitNodes struct {
	unit, alg, burst, mult, repl, lease, release *yaml.Node
	unitText                                     string
	cal                                          calendarNodes
}

// limitFields reads the fields of rate_limit mapping n into l.
func (p *parser) limitFields(l *limits.Limit, n *yaml.Node, path string) limitNodes {
	var ln limitNodes
	p.fields(n, path, func(key string, k, v *yaml.Node) {
		fp := join(path, key)
		switch key {
		case "unit":
			ln.unit, ln.unitText = v, p.str(v, fp)
		case "requests_per_unit":
			l.Requests = p.uint(v, fp, 1<<32-1)
		case "unlimited":
			l.Unlimited = p.bool(v, fp)
		case "name":
			l.Name = p.str(v, fp)
		case "replaces":
			ln.repl, l.Replaces = v, p.replaces(v, fp)
		case "algorithm":
			ln.alg = v
			if a, err := limits.ParseAlgorithm(p.str(v, fp)); err != nil {
				p.errorf(v, fp, "%v", err)
			} else {
				l.Algorithm = a
			}
		case "burst":
			ln.burst, l.Burst = v, p.positive(v, fp)
		case "unit_multiplier":
			ln.mult, l.Multiplier = v, p.positive(v, fp)
		case "lease":
			ln.lease, l.Lease = v, p.positive(v, fp)
		case "release_after":
			ln.release, l.ReleaseAfter = v, p.duration(v, fp)
			p.releaseAfter = true
		case "calendar", "time_zone", "week_start", "reset_day":
			p.calendarField(&ln.cal, key, v, fp)
		default:
			p.unknownField(k, fp, key, limitFieldNames)
		}
	})
	return ln
}

// checkCounted checks the fields of a limit that counts: its unit, and
// the fields that only some algorithms take.
func (p *parser) checkCounted(l *limits.Limit, ln limitNodes, n *yaml.Node, path string) {
	if ln.unit == nil {
		p.errorf(n, join(path, "unit"), "required (%s)", limits.UnitNames())
	} else if u, err := limits.ParseUnit(ln.unitText); err != nil {
		p.errorf(ln.unit, join(path, "unit"), "%v", err)
	} else {
		l.Unit = u
	}
	if ln.burst != nil && !l.Algorithm.Bucketed() {
		p.errorf(ln.burst, join(path, "burst"), "applies only to token_bucket and leaky_bucket, not %s", l.Algorithm)
	}
	if ln.burst != nil && l.Requests == 0 {
		p.errorf(ln.burst, join(path, "burst"), "needs requests_per_unit above 0 (0 bans every request)")
	}
	if ln.lease != nil && !l.Algorithm.Leasable() {
		p.errorf(ln.lease, join(path, "lease"), "applies only to %s, not %s", limits.LeasableNames(), l.Algorithm)
	}
	if ln.release != nil && !reservable(l.Algorithm) {
		p.errorf(ln.release, join(path, "release_after"), "applies only to %s, not %s", reservableNames, l.Algorithm)
	}
	if ln.release != nil && ln.lease != nil {
		p.errorf(ln.release, join(path, "release_after"), "a limit that reserves is never leased: drop lease or release_after")
	}
}

// reservable reports whether a limit of algorithm a can hold
// reservations (release_after): the counting algorithms whose refund
// gives back hits wherever they were counted.
func reservable(a limits.Algorithm) bool {
	return a == limits.FixedWindow || a == limits.SlidingWindow || a == limits.TokenBucket || a == limits.LeakyBucket
}

const reservableNames = "fixed_window, sliding_window, token_bucket or leaky_bucket"

// maxRelease bounds release_after: a reservation is kept, with its hold,
// until it is settled or released.
const maxRelease = 24 * time.Hour

// onlyCounted reports the fields of an unlimited limit that only counted
// limits have (set is each such field's node, nil if absent), and an
// unlimited limit inside a rate_limits list.
func (p *parser) onlyCounted(n *yaml.Node, path string, single bool, set map[string]*yaml.Node) {
	if !single {
		p.errorf(n, join(path, "unlimited"), "unlimited goes in rate_limit, not in a rate_limits list")
	}
	for _, name := range []string{"unit", "algorithm", "burst", "unit_multiplier", "lease", "release_after"} {
		if v := set[name]; v != nil {
			p.errorf(v, join(path, name), "must not be set when unlimited is true")
		}
	}
}

func (p *parser) replaces(n *yaml.Node, path string) []string {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {name: ...}, got %s", kindName(n))
		return nil
	}
	var names []string
	for i, item := range n.Content {
		item = deref(item)
		ip := fmt.Sprintf("%s[%d]", path, i)
		if item.Kind != yaml.MappingNode {
			p.errorf(item, ip, "want {name: ...}, got %s", kindName(item))
			continue
		}
		name := ""
		p.fields(item, ip, func(key string, k, v *yaml.Node) {
			if key != "name" {
				p.unknownField(k, join(ip, key), key, []string{"name"})
				return
			}
			name = p.str(v, join(ip, "name"))
		})
		if name == "" {
			p.errorf(item, join(ip, "name"), "required and must not be empty")
			continue
		}
		names = append(names, name)
	}
	return names
}

// duration parses a duration such as "90s" or "5m", above 0 and at most
// maxRelease.
func (p *parser) duration(n *yaml.Node, path string) time.Duration {
	text := p.str(n, path)
	d, err := time.ParseDuration(text)
	switch {
	case text == "":
	case err != nil:
		p.errorf(n, path, "want a duration such as 90s or 5m, got %q", text)
	case d < time.Millisecond:
		p.errorf(n, path, "must be at least 1ms, got %s", text)
	case d > maxRelease:
		p.errorf(n, path, "at most %s, got %s", maxRelease, text)
	}
	return d
}
