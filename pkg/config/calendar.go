package config

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// calendarNodes are a rate_limit's calendar fields: calendar (on or
// off), time_zone, week_start and reset_day, with their values.
type calendarNodes struct {
	on, zone, week, day *yaml.Node
	enabled             bool
	loc                 *time.Location
	weekStart           time.Weekday
	resetDay            int
}

// calendarField reads one calendar field of a rate_limit.
func (p *parser) calendarField(c *calendarNodes, key string, v *yaml.Node, fp string) {
	switch key {
	case "calendar":
		c.on, c.enabled = v, p.bool(v, fp)
	case "time_zone":
		c.zone, c.loc = v, p.timeZone(v, fp)
	case "week_start":
		c.week = v
		name := p.str(v, fp)
		for d := time.Sunday; d <= time.Saturday; d++ {
			if strings.EqualFold(name, d.String()) {
				c.weekStart = d
				return
			}
		}
		p.errorf(v, fp, "unknown day %q (want monday, tuesday, ... or sunday)", name)
	case "reset_day":
		c.day, c.resetDay = v, int(p.uint(v, fp, 31))
		if c.resetDay == 0 && v.Value == "0" {
			p.errorf(v, fp, "a day of the month: 1 to 31")
		}
	}
}

// timeZone reads an IANA time zone name. UTC is the default; Local is
// refused, since it would differ from machine to machine.
func (p *parser) timeZone(v *yaml.Node, fp string) *time.Location {
	name := p.str(v, fp)
	if name == "" || name == "Local" {
		p.errorf(v, fp, "want an IANA time zone name such as Europe/Berlin or UTC, not %q", name)
		return nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		p.errorf(v, fp, "unknown time zone %q", name)
		return nil
	}
	return loc
}

// calendar returns l aligned to its calendar fields (or, with
// Options.CalendarMonths, a UTC month), or nil after recording why it
// cannot be.
func (p *parser) calendar(l *limits.Limit, ln limitNodes, path string) *limits.Limit {
	c := ln.cal
	if !c.enabled {
		for i, n := range []*yaml.Node{c.zone, c.week, c.day} {
			if n != nil {
				p.errorf(n, join(path, [...]string{"time_zone", "week_start", "reset_day"}[i]), "applies only with calendar: true")
			}
		}
		if c.on == nil && p.opts.CalendarMonths && l.Unit == limits.UnitMonth && l.Multiplier == 1 && l.Algorithm == limits.FixedWindow {
			cl, err := l.WithCalendar(&limits.Calendar{})
			if err != nil {
				p.errorf(nil, path, "%v", err)
				return nil
			}
			return cl
		}
		return l
	}
	cal := &limits.Calendar{Location: p.zone, WeekStart: time.Monday, ResetDay: c.resetDay}
	if c.loc != nil {
		cal.Location = c.loc
	}
	if c.week != nil {
		cal.WeekStart = c.weekStart
	}
	if c.week != nil && l.Unit != limits.UnitWeek {
		p.errorf(c.week, join(path, "week_start"), "applies only to unit week, not %s", l.Unit)
		return nil
	}
	if c.day != nil && l.Unit != limits.UnitMonth {
		p.errorf(c.day, join(path, "reset_day"), "applies only to unit month, not %s", l.Unit)
		return nil
	}
	cl, err := l.WithCalendar(cal)
	if err != nil {
		p.errorf(c.on, join(path, "calendar"), "%v", err)
		return nil
	}
	return cl
}
