package refenv

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// Applied is what the reference's variables did to a flag set.
type Applied struct {
	// ByFlag names, for each flag the variables set, the variables (or
	// the reference's defaults) it came from.
	ByFlag map[string]string
	// ByDefault holds the flags that the reference's defaults alone set,
	// run as Name.
	ByDefault map[string]bool
	// Password and SentinelPassword are the Redis passwords the variables
	// give, nil if none; PasswordFrom and SentinelPasswordFrom name the
	// variables.
	Password, SentinelPassword         *string
	PasswordFrom, SentinelPasswordFrom string
	// Refused lists the reference's settings in use that are not
	// honoured, each with the reason.
	Refused []string
	// Settings holds the values of the settings that the variables set
	// and that have no flag of their own, by name: the reference's
	// tuning (XDS_CLIENT_BACKOFF_*, XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES,
	// TRACING_SERVICE_*) has no use beside our flags and the standard
	// OTEL_* variables, so it is honoured without one.
	Settings map[string]string
}

// Settings without a flag, which Applied.Settings may hold.
const (
	XDSBackoffInitial        = "xds-backoff-initial"
	XDSBackoffMax            = "xds-backoff-max"
	XDSBackoffJitter         = "xds-backoff-jitter"
	XDSMaxMessageBytes       = "xds-max-message-bytes"
	TracingServiceName       = "tracing-service-name"
	TracingServiceNamespace  = "tracing-service-namespace"
	TracingServiceInstanceID = "tracing-service-instance-id"
)

// flagless are the settings without a flag.
var flagless = map[string]bool{
	XDSBackoffInitial: true, XDSBackoffMax: true, XDSBackoffJitter: true, XDSMaxMessageBytes: true,
	TracingServiceName: true, TracingServiceNamespace: true, TracingServiceInstanceID: true,
}

// Apply sets fs's flags from the reference's variables, except those
// in explicit (set by the command line or an RLS_ variable). Invalid
// values are reported all at once, each naming its variable.
func Apply(fs *flag.FlagSet, refMode bool, getenv func(string) (string, bool), explicit map[string]bool) (*Applied, error) {
	v := &refValues{getenv: getenv, refMode: refMode}
	a := &Applied{ByFlag: map[string]string{}, ByDefault: map[string]bool{}, Settings: map[string]string{}}
	for _, m := range refMappings {
		var set []string
		for _, name := range m.vars {
			if v.isSet(name) {
				set = append(set, name)
			}
		}
		if len(set) == 0 && !(refMode && m.defaults) {
			continue
		}
		if m.whole && slices.ContainsFunc(m.flags, func(f string) bool { return explicit[f] }) {
			continue
		}
		var out refOut
		nerrs := len(v.errs)
		m.apply(v, &out)
		if len(v.errs) > nerrs {
			continue
		}
		from := strings.Join(set, ", ")
		switch {
		case len(m.vars) == 0:
			from = "envoyproxy/ratelimit's behaviour (run as " + Name + ")"
		case len(set) == 0:
			from = "the defaults of " + strings.Join(m.vars, ", ") + " (run as " + Name + ")"
		}
		for _, f := range out.flags {
			if explicit[f.name] {
				continue
			}
			if flagless[f.name] {
				a.Settings[f.name] = f.value
			} else if err := fs.Set(f.name, f.value); err != nil {
				v.errs = append(v.errs, fmt.Errorf("%s (as --%s=%s): %w", strings.Join(m.vars, ", "), f.name, f.value, err))
				continue
			}
			a.ByFlag[f.name] = from
			a.ByDefault[f.name] = len(set) == 0
		}
		if out.password != nil {
			a.Password, a.PasswordFrom = out.password, from
		}
		if out.sentinelPassword != nil {
			a.SentinelPassword, a.SentinelPasswordFrom = out.sentinelPassword, from
		}
	}
	a.Refused = refused(v)
	return a, errors.Join(v.errs...)
}

// refused lists the refusals active in v, each as its variables in use
// and the reason.
func refused(v *refValues) []string {
	var out []string
	for _, r := range refRefusals {
		var on bool
		if r.active != nil {
			on = r.active(v)
		} else {
			on = v.anySetNonDefault(r.vars...)
		}
		if !on {
			continue
		}
		names := slices.DeleteFunc(slices.Clone(r.vars), func(n string) bool { return !v.nonDefault(n) })
		if len(names) == 0 {
			names = slices.DeleteFunc(slices.Clone(r.vars), func(n string) bool { return !v.isSet(n) })
		}
		if len(names) == 0 {
			names = []string{r.vars[0] + " (its default, run as " + Name + ")"}
		}
		out = append(out, strings.Join(names, ", ")+": "+r.reason)
	}
	return out
}
