package config

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// overrideFields are the fields of an override mapping: how a limit that
// Envoy sends with a descriptor (descriptor.limit) is counted. They read
// as a rate_limit's and a descriptor's charge; the sent limit gives the
// requests and the unit.
var overrideFields = []string{"algorithm", "unit_multiplier", "burst", "charge", "calendar", "time_zone", "week_start", "reset_day"}

// sentFields are the rate_limit fields an override cannot set: the sent
// limit's own, or what a sent limit has no use for.
var sentFields = map[string]string{
	"unit":              "comes with each request, in Envoy's descriptor.limit",
	"requests_per_unit": "comes with each request, in Envoy's descriptor.limit",
	"unlimited":         "does not apply: a sent limit always counts",
	"name":              "does not apply to a sent limit",
	"replaces":          "does not apply to a sent limit",
	"lease":             "does not apply to a sent limit",
}

// override parses an override mapping at path: a rule's or, at the top of
// a file, its domain's. It returns nil for null or a mapping with a
// problem, which it records.
func (p *parser) override(n *yaml.Node, path string) *limits.OverrideSpec {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of how Envoy's descriptor.limit is counted (%s), got %s", strings.Join(overrideFields, ", "), kindName(n))
		return nil
	}
	nerr := len(p.errs)
	s := &limits.OverrideSpec{}
	var burst *yaml.Node
	var cal calendarNodes
	p.fields(n, path, func(key string, k, v *yaml.Node) {
		fp := join(path, key)
		switch key {
		case "algorithm":
			a, err := limits.ParseAlgorithm(p.str(v, fp))
			switch {
			case err != nil:
				p.errorf(v, fp, "%v", err)
			case a == limits.Concurrency:
				p.errorf(v, fp, "concurrency counts requests in flight, not a sent limit (want one of fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket)")
			}
			s.Algorithm = a
		case "unit_multiplier":
			s.Multiplier = p.positive(v, fp)
		case "burst":
			burst, s.Burst = v, p.positive(v, fp)
		case "charge":
			c, err := limits.ParseCharge(p.str(v, fp))
			if err != nil {
				p.errorf(v, fp, "%v", err)
			}
			s.Charge = c
		case "calendar", "time_zone", "week_start", "reset_day":
			p.calendarField(&cal, key, v, fp)
		default:
			if why, ok := sentFields[key]; ok {
				p.errorf(k, fp, "%s", why)
				return
			}
			p.unknownField(k, fp, key, overrideFields)
		}
	})
	if burst != nil && !s.Algorithm.Bucketed() && len(p.errs) == nerr {
		p.errorf(burst, join(path, "burst"), "applies only to token_bucket and leaky_bucket, not %s", s.Algorithm)
	}
	s.Calendar = p.overrideCalendar(cal, path)
	if s.Calendar != nil && (s.Algorithm != limits.FixedWindow || s.Multiplier > 1) && len(p.errs) == nerr {
		p.errorf(cal.on, join(path, "calendar"), "a calendar window is counted as a fixed_window of one unit, not %s over %d", s.Algorithm, max(s.Multiplier, 1))
	}
	if len(p.errs) > nerr {
		return nil
	}
	if err := s.Check(); err != nil {
		p.errorf(n, path, "%v", err)
		return nil
	}
	return s
}

// overrideCalendar returns the calendar of an override's calendar
// fields, nil without calendar: true. Its zone is the override's own,
// else the file's time_zone: for a file's override, set once the file
// is read (see parseFile), wherever it says it.
func (p *parser) overrideCalendar(c calendarNodes, path string) *limits.Calendar {
	if !c.enabled {
		for i, n := range []*yaml.Node{c.zone, c.week, c.day} {
			if n != nil {
				p.errorf(n, join(path, [...]string{"time_zone", "week_start", "reset_day"}[i]), "applies only with calendar: true")
			}
		}
		return nil
	}
	cal := &limits.Calendar{Location: c.loc, WeekStart: time.Monday, ResetDay: c.resetDay}
	if c.loc == nil {
		cal.Location = p.zone
	}
	if c.week != nil {
		cal.WeekStart = c.weekStart
	}
	return cal
}

// sameOverride reports whether a and b count alike: what two files of
// one domain must agree on.
func sameOverride(a, b *limits.OverrideSpec) bool {
	x, y := *a, *b
	x.Calendar, y.Calendar = nil, nil
	return x == y && sameCalendar(a.Calendar, b.Calendar)
}

func sameCalendar(a, b *limits.Calendar) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Location.String() == b.Location.String() && a.WeekStart == b.WeekStart && a.ResetDay == b.ResetDay
}
