package limits

import (
	"fmt"
	"strconv"
)

// OverrideKeys says which counter a descriptor's own limit (Envoy's
// descriptor.limit, see Override) counts on. The zero value is
// OverrideShared.
type OverrideKeys uint8

// The override key modes.
const (
	// OverrideShared counts an override on the key a rule's fixed-window
	// limit of the same window has for the same entries, as
	// envoyproxy/ratelimit does. Overrides and rules then spend one
	// counter: a request with a small override (1 per day) can push the
	// rule's counter over for requests without it, and the other way
	// round, until the window ends.
	OverrideShared OverrideKeys = iota
	// OverrideSeparate counts each override on a key of its own, which
	// names the override's requests and unit: no rule limit and no other
	// override shares it.
	OverrideSeparate
)

var overrideKeysNames = [...]string{OverrideShared: "shared", OverrideSeparate: "separate"}

// ParseOverrideKeys parses "shared" or "separate".
func ParseOverrideKeys(s string) (OverrideKeys, error) {
	for m, name := range overrideKeysNames {
		if name == s {
			return OverrideKeys(m), nil
		}
	}
	return OverrideShared, fmt.Errorf("unknown override keys %q (want shared or separate)", s)
}

// String returns the mode's flag value.
func (m OverrideKeys) String() string {
	if int(m) < len(overrideKeysNames) {
		return overrideKeysNames[m]
	}
	return fmt.Sprintf("OverrideKeys(%d)", m)
}

// Set parses s into m, so that *OverrideKeys is a flag.Value.
func (m *OverrideKeys) Set(s string) error {
	v, err := ParseOverrideKeys(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// overrideLimit compiles o into the fixed-window limit it stands for. With
// OverrideSeparate its identity, the last part of its key (see AppendKey),
// is override/<requests>/<unit>, which no rule limit's
// <algorithm>/<window seconds> can equal.
func overrideLimit(o *Override, keys OverrideKeys) (*Limit, error) {
	l, err := NewLimit(FixedWindow, o.Requests, o.Unit, 1, 0)
	if err != nil {
		return nil, err
	}
	if keys == OverrideSeparate {
		l.id = "override/" + strconv.FormatUint(o.Requests, 10) + "/" + o.Unit.String()
	}
	return l, nil
}
