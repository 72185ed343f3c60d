package refenv

import (
	"flag"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/suggest"
)

// Report is what the environment did to the settings, which the start
// log (internal/envlog) shows.
type Report struct {
	// RefMode is set when the program runs as Name.
	RefMode bool
	// From is where each flag set other than on the command line got its
	// value: "RLS_X", or the reference's variables; Value is its value
	// as the log shows it (a URL's password redacted).
	From, Value map[string]string
	// PasswordFrom and SentinelPasswordFrom name the reference's
	// variable the password came from, if it did.
	PasswordFrom, SentinelPasswordFrom string
	// Refused lists the reference's settings in use that we do not
	// honour, each with the reason.
	Refused []string
	// UnknownRLS lists RLS_ variables that no setting reads.
	UnknownRLS []string
	// RLSHints names, for those near a setting's variable, that variable.
	RLSHints []string
}

// Report returns what the environment did to the settings, once they
// are checked and Passwords has run; environ lists the environment's
// variables (nil: unknown). Every setting an RLS_ or reference variable
// set is in it, and those the reference's defaults set when they differ
// from ours.
func (e *Env) Report(environ []string) Report {
	r := e.report
	e.fs.VisitAll(func(f *flag.Flag) {
		if e.inArgs[f.Name] || (e.applied.ByDefault[f.Name] && f.Value.String() == f.DefValue) {
			return
		}
		if _, ok := e.getenv(RLSVar(f.Name)); ok {
			r.From[f.Name] = RLSVar(f.Name)
		} else if vars, ok := e.applied.ByFlag[f.Name]; ok {
			r.From[f.Name] = vars
		} else {
			return
		}
		r.Value[f.Name] = logValue(f.Name, f.Value.String())
	})
	r.UnknownRLS = unknownRLS(e.fs, environ)
	r.RLSHints = rlsHints(e.fs, r.UnknownRLS)
	return r
}

// logValue is a flag's value for the log: a URL's password redacted.
func logValue(name, v string) string {
	if name != "redis-url" {
		return v
	}
	u, err := url.Parse(v)
	if err != nil {
		return "(not shown: not a URL)"
	}
	return u.Redacted()
}

// unknownRLS lists the RLS_ variables of environ that no setting reads: a
// misspelt name would otherwise be ignored without a word.
func unknownRLS(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	for _, s := range rlsSecrets {
		known[s] = true
	}
	fs.VisitAll(func(f *flag.Flag) { known[RLSVar(f.Name)] = true })
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "RLS_") && !known[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// rlsHints returns, for each of the unknown RLS_ variables that is near a
// known one, "RLS_X: RLS_Y".
func rlsHints(fs *flag.FlagSet, unknown []string) []string {
	known := slices.Clone(rlsSecrets)
	fs.VisitAll(func(f *flag.Flag) { known = append(known, RLSVar(f.Name)) })
	var out []string
	for _, name := range unknown {
		if near, ok := suggest.Nearest(name, known); ok {
			out = append(out, name+": "+near)
		}
	}
	return out
}
