package refenv

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"
)

// refOut collects what a mapping sets.
type refOut struct {
	flags            []refFlag
	password         *string
	sentinelPassword *string
}

type refFlag struct{ name, value string }

func (o *refOut) set(name, value string) { o.flags = append(o.flags, refFlag{name, value}) }

// refValues reads the reference's variables with their defaults.
type refValues struct {
	getenv  func(string) (string, bool)
	refMode bool
	errs    []error
}

func (v *refValues) isSet(name string) bool {
	_, ok := v.getenv(name)
	return ok
}

// str is the variable's value, or the reference's default if it is unset.
func (v *refValues) str(name string) string {
	if s, ok := v.getenv(name); ok {
		return s
	}
	return refVars[name].def
}

func (v *refValues) fail(name, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
}

func (v *refValues) boolean(name string) bool {
	b, err := strconv.ParseBool(v.str(name))
	if err != nil {
		v.fail(name, "want true or false, got %q", v.str(name))
	}
	return b
}

func (v *refValues) boolText(name string) string { return strconv.FormatBool(v.boolean(name)) }

func (v *refValues) integer(name string) int64 {
	n, err := strconv.ParseInt(v.str(name), 0, 64)
	if err != nil {
		v.fail(name, "want an integer, got %q", v.str(name))
	}
	return n
}

func (v *refValues) float(name string) float64 {
	f, err := strconv.ParseFloat(v.str(name), 64)
	if err != nil {
		v.fail(name, "want a number, got %q", v.str(name))
	}
	return f
}

func (v *refValues) duration(name string) time.Duration {
	d, err := time.ParseDuration(v.str(name))
	if err != nil {
		v.fail(name, "want a duration such as 10s or 1h30m, got %q", v.str(name))
	}
	return d
}

// hostPort joins a host and a port variable into an address.
func (v *refValues) hostPort(host, port string) string {
	p := v.integer(port)
	if p < 0 || p > 65535 {
		v.fail(port, "want a port from 0 to 65535, got %d", p)
	}
	return net.JoinHostPort(v.str(host), strconv.FormatInt(p, 10))
}

// nonDefault reports whether name is set to a value other than the
// reference's default, comparing as the reference parses it; a value it
// could not parse is not the default.
func (v *refValues) nonDefault(name string) bool {
	s, ok := v.getenv(name)
	if !ok {
		return false
	}
	rv := refVars[name]
	if s == rv.def {
		return false
	}
	switch rv.kind {
	case refBool:
		a, err1 := strconv.ParseBool(s)
		b, err2 := strconv.ParseBool(rv.def)
		return err1 != nil || err2 != nil || a != b
	case refInt:
		a, err1 := strconv.ParseInt(s, 0, 64)
		b, err2 := strconv.ParseInt(rv.def, 0, 64)
		return err1 != nil || err2 != nil || a != b
	case refFloat:
		a, err1 := strconv.ParseFloat(s, 64)
		b, err2 := strconv.ParseFloat(rv.def, 64)
		return err1 != nil || err2 != nil || a != b
	case refDuration:
		a, err1 := time.ParseDuration(s)
		b, err2 := time.ParseDuration(rv.def)
		return err1 != nil || err2 != nil || a != b
	}
	return true
}

func (v *refValues) anySetNonDefault(names ...string) bool {
	return slices.ContainsFunc(names, v.nonDefault)
}
