package limits

import (
	"errors"
	"fmt"
	"strings"
)

// This file holds the text forms of the rules' types that people read
// and type: a limit in one line, and a descriptor's entries.

// String describes l in one line, e.g. `token_bucket 5 per 1s, burst 10,
// name "api"`: what `check`, `explain`, the admin endpoints and the
// rejection log show of a limit.
func (l *Limit) String() string {
	var b strings.Builder
	if l.Unlimited {
		b.WriteString("unlimited")
	} else {
		if l.Algorithm == Concurrency {
			fmt.Fprintf(&b, "concurrency %d in flight, a slot freed after %s", l.Requests, l.Window())
		} else if l.Calendar != nil {
			fmt.Fprintf(&b, "%s %d per calendar %s in %s", l.Algorithm, l.Requests, l.Unit, l.Calendar.describe(l.Unit))
		} else {
			fmt.Fprintf(&b, "%s %d per %s", l.Algorithm, l.Requests, l.Window())
		}
		if l.Algorithm.Bucketed() {
			fmt.Fprintf(&b, ", burst %d", l.Burst)
		}
		if l.Requests == 0 {
			b.WriteString(" (bans every request)")
		}
		if l.Lease > 0 {
			fmt.Fprintf(&b, ", lease %d", l.Lease)
		}
		if l.ReleaseAfter > 0 {
			fmt.Fprintf(&b, ", reservations released after %s", l.ReleaseAfter)
		}
	}
	if l.Name != "" {
		fmt.Fprintf(&b, ", name %q", l.Name)
	}
	if len(l.Replaces) > 0 {
		b.WriteString(", replaces ")
		for i, n := range l.Replaces {
			if i > 0 {
				b.WriteString(" and ")
			}
			fmt.Fprintf(&b, "%q", n)
		}
	}
	if l.Shadow {
		b.WriteString(", shadow")
	}
	return b.String()
}

// FormatEntries writes entries as ParseEntries reads them: key=value pairs joined by commas, with '\' escaping a comma or
// backslash, and an '=' in a key.
func FormatEntries(entries []Entry, value func(string) string) string {
	var b strings.Builder
	esc := func(s string, eq bool) {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c == ',' || c == '\\' || (eq && c == '=') {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
	}
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		esc(e.Key, true)
		b.WriteByte('=')
		esc(value(e.Value), false)
	}
	return b.String()
}

// ParseEntries parses a descriptor's entries as FormatEntries writes
// them and people type them (`explain`, the admin endpoints):
// comma-separated key=value pairs. The first '='
// of an entry ends its key, so a value may contain '='. A backslash makes
// the next character literal: `\,` is a comma and `\\` a backslash inside
// a key or value (and `\=` an '=' inside a key). Values may be empty; keys
// may not.
func ParseEntries(s string) ([]Entry, error) {
	if s == "" {
		return nil, errors.New("empty descriptor; want key=value[,key=value...]")
	}
	var ents []Entry
	var cur strings.Builder
	var key string
	inValue := false
	start := 0
	end := func(i int) error {
		raw := s[start:i]
		switch {
		case !inValue:
			return fmt.Errorf("entry %d %q has no '='; want key=value", len(ents), raw)
		case key == "":
			return fmt.Errorf("entry %d %q has an empty key", len(ents), raw)
		}
		ents = append(ents, Entry{Key: key, Value: cur.String()})
		cur.Reset()
		key, inValue, start = "", false, i+1
		return nil
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("entry %d %q ends in a lone backslash", len(ents), s[start:])
			}
			i++
			cur.WriteByte(s[i])
		case c == ',':
			if err := end(i); err != nil {
				return nil, err
			}
		case c == '=' && !inValue:
			key, inValue = cur.String(), true
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if err := end(len(s)); err != nil {
		return nil, err
	}
	return ents, nil
}

// String describes s in one line as a rule file's override says it, e.g.
// `token_bucket, unit_multiplier 2, burst 50, charge admission`: the
// fields set, the algorithm always.
func (s *OverrideSpec) String() string {
	var b strings.Builder
	b.WriteString(s.Algorithm.String())
	if s.Multiplier > 1 {
		fmt.Fprintf(&b, ", unit_multiplier %d", s.Multiplier)
	}
	if s.Burst > 0 {
		fmt.Fprintf(&b, ", burst %d", s.Burst)
	}
	if s.Charge != ChargeAuto {
		fmt.Fprintf(&b, ", charge %s", s.Charge)
	}
	return b.String()
}
