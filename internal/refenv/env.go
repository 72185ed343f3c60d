package refenv

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Env is the environment of one start applied to a flag set: which of
// its flags the command line set, which their RLS_ variables, and which
// the reference's variables; the reference's Redis passwords; and what
// the start log says of it all (Report).
type Env struct {
	fs      *flag.FlagSet
	getenv  func(string) (string, bool)
	inArgs  map[string]bool   // the flags the command line set
	byRLS   map[string]string // flag → its RLS_ variable, where that set it
	applied *Applied
	report  Report
}

// Load sets the flags of fs that its command line, parsed already, left
// alone: each from its RLS_ variable (RLSVar), else from the reference's
// variables (Apply), run as Name from their defaults too; the command
// line wins whatever order they are set in. The settings that only the
// reference's variables set (Applied.Settings) are defined on flagless
// under their names (XDSBackoffInitial, ...): those the variables give
// are set there. getenv reads one variable. An error names the variable
// it comes from.
func Load(fs, flagless *flag.FlagSet, refMode bool, getenv func(string) (string, bool)) (*Env, error) {
	e := &Env{fs: fs, getenv: getenv, inArgs: map[string]bool{}, byRLS: map[string]string{}}
	fs.Visit(func(f *flag.Flag) { e.inArgs[f.Name] = true })
	a, err := Apply(fs, refMode, getenv, e.explicit())
	if err != nil {
		return nil, err
	}
	e.applied = a
	e.report = Report{
		RefMode: refMode, From: map[string]string{}, Value: map[string]string{},
		PasswordFrom: a.PasswordFrom, SentinelPasswordFrom: a.SentinelPasswordFrom, Refused: a.Refused,
	}
	if err := e.setFlagless(flagless); err != nil {
		return nil, err
	}
	if err := e.setRLS(); err != nil {
		return nil, err
	}
	return e, nil
}

// RLSVar is the RLS_ variable of a flag: RLS_ and its name in upper
// case, '-' as '_'.
func RLSVar(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// rlsSecrets are the RLS_ variables that are not flags.
var rlsSecrets = []string{"RLS_REDIS_PASSWORD", "RLS_REDIS_SENTINEL_PASSWORD"}

// explicit returns the flags that the command line or RLS_ variables
// set.
func (e *Env) explicit() map[string]bool {
	out := maps.Clone(e.inArgs)
	e.fs.VisitAll(func(f *flag.Flag) {
		if _, ok := e.getenv(RLSVar(f.Name)); ok {
			out[f.Name] = true
		}
	})
	return out
}

// setFlagless sets the settings without a flag, defined on fs, that the
// reference's variables give, naming the variables in an error.
func (e *Env) setFlagless(fs *flag.FlagSet) error {
	a := e.applied
	for _, name := range slices.Sorted(maps.Keys(a.Settings)) {
		if err := fs.Set(name, a.Settings[name]); err != nil {
			return fmt.Errorf("%s: %w", a.ByFlag[name], err)
		}
		if !a.ByDefault[name] {
			e.report.From[name], e.report.Value[name] = a.ByFlag[name], a.Settings[name]
		}
	}
	return nil
}

// setRLS sets each flag the command line left alone from its RLS_
// variable, if that is set; the first value that does not parse is an
// error naming the variable.
func (e *Env) setRLS() error {
	var err error
	e.fs.VisitAll(func(f *flag.Flag) {
		name := RLSVar(f.Name)
		v, ok := e.getenv(name)
		if !ok || e.inArgs[f.Name] || err != nil {
			return
		}
		if serr := e.fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%s: %w", name, serr)
		}
	})
	if err != nil {
		return err
	}
	e.fs.VisitAll(func(f *flag.Flag) {
		if _, ok := e.getenv(RLSVar(f.Name)); ok && !e.inArgs[f.Name] {
			e.byRLS[f.Name] = RLSVar(f.Name)
		}
	})
	return nil
}

// OnCommandLine reports whether the command line set the flag name.
func (e *Env) OnCommandLine(name string) bool { return e.inArgs[name] }

// Explain adds to an error in the settings which of the flags it names
// got their values from an RLS_ variable or the reference's variables,
// which the user set, not the flags. Other errors are returned as they
// are.
func (e *Env) Explain(err error) error {
	var notes []string
	msg := err.Error()
	from := maps.Clone(e.applied.ByFlag)
	maps.Copy(from, e.byRLS)
	for f, vars := range from {
		if namesFlag(msg, f) {
			notes = append(notes, "--"+f+" is set from "+vars)
		}
	}
	if len(notes) == 0 {
		return err
	}
	sort.Strings(notes)
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}

// namesFlag reports whether msg names --f, not a longer flag that starts
// with it.
func namesFlag(msg, f string) bool {
	i := strings.Index(msg, "--"+f)
	for i >= 0 {
		end := i + 2 + len(f)
		if end == len(msg) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-", rune(msg[end])) {
			return true
		}
		next := strings.Index(msg[end:], "--"+f)
		if next < 0 {
			return false
		}
		i = end + next
	}
	return false
}

// Passwords sets *password and *sentinel to the Redis passwords the
// reference's variables (REDIS_AUTH, REDIS_SENTINEL_AUTH) give, where
// neither RLS_REDIS_PASSWORD (RLS_REDIS_SENTINEL_PASSWORD) nor a password
// file (passwordFile, sentinelFile: "" for none) gives one; the others
// are left alone, and the report does not name the reference's.
func (e *Env) Passwords(password, sentinel *string, passwordFile, sentinelFile string) {
	a := e.applied
	if _, ok := e.getenv("RLS_REDIS_PASSWORD"); !ok && passwordFile == "" && a.Password != nil {
		*password = *a.Password
	} else {
		e.report.PasswordFrom = ""
	}
	if _, ok := e.getenv("RLS_REDIS_SENTINEL_PASSWORD"); !ok && sentinelFile == "" && a.SentinelPassword != nil {
		*sentinel = *a.SentinelPassword
	} else {
		e.report.SentinelPasswordFrom = ""
	}
}
