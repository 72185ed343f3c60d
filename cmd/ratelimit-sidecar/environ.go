package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// How the environment becomes settings: the reference's variables (see
// refenv.go) applied below the RLS_ variables and the command line, and
// the start log of where each setting came from.

// refApplied is the reference's environment, applied to a flag set, and
// what the RLS_ variables and the command line did beside it.
type refApplied struct {
	*refenv.Applied
	report envlog.Report
	byRLS  map[string]string // flag → its RLS_ variable, where that set it
}

// applyRefEnv sets fs's flags from the reference's variables, except those
// in explicit (set by the command line or an RLS_ variable).
func applyRefEnv(fs *flag.FlagSet, refMode bool, getenv func(string) (string, bool), explicit map[string]bool) (*refApplied, error) {
	ra, err := refenv.Apply(fs, refMode, getenv, explicit)
	if err != nil {
		return nil, err
	}
	return &refApplied{Applied: ra, report: envlog.Report{
		RefMode: refMode, From: map[string]string{}, Value: map[string]string{},
		PasswordFrom: ra.PasswordFrom, SentinelPasswordFrom: ra.SentinelPasswordFrom, Refused: ra.Refused,
	}}, nil
}

// setFlagless sets the settings that only the reference's variables set,
// which have no flag (refenv.Applied.Settings), from their defaults and
// a, naming the variables in an error.
func (c *settings) setFlagless(a *refApplied) error {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.DurationVar(&c.rules.xds.BackoffInitial, refenv.XDSBackoffInitial, xds.DefaultBackoffInitial, "")
	fs.DurationVar(&c.rules.xds.BackoffMax, refenv.XDSBackoffMax, xds.DefaultBackoffMax, "")
	fs.Float64Var(&c.rules.xds.BackoffJitter, refenv.XDSBackoffJitter, xds.DefaultBackoffJitter, "")
	fs.IntVar(&c.rules.xds.MaxMessageBytes, refenv.XDSMaxMessageBytes, 0, "")
	fs.StringVar(&c.tracing.serviceName, refenv.TracingServiceName, "", "")
	fs.StringVar(&c.tracing.serviceNamespace, refenv.TracingServiceNamespace, "", "")
	fs.StringVar(&c.tracing.serviceInstanceID, refenv.TracingServiceInstanceID, "", "")
	for _, name := range slices.Sorted(maps.Keys(a.Settings)) {
		if err := fs.Set(name, a.Settings[name]); err != nil {
			return fmt.Errorf("%s: %w", a.ByFlag[name], err)
		}
		if !a.ByDefault[name] {
			a.report.From[name], a.report.Value[name] = a.ByFlag[name], a.Settings[name]
		}
	}
	return nil
}

// rlsEnvName is the RLS_ variable of a flag.
func rlsEnvName(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// rlsSecrets are the RLS_ variables that are not flags.
var rlsSecrets = []string{"RLS_REDIS_PASSWORD", "RLS_REDIS_SENTINEL_PASSWORD"}

// unknownRLS lists the RLS_ variables of environ that no setting reads: a
// misspelt name would otherwise be ignored without a word.
func unknownRLS(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	for _, s := range rlsSecrets {
		known[s] = true
	}
	fs.VisitAll(func(f *flag.Flag) { known[rlsEnvName(f.Name)] = true })
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

// explicitFlags returns the flags that the command line (inArgs) or
// RLS_ variables set.
func explicitFlags(fs *flag.FlagSet, inArgs map[string]bool, getenv func(string) (string, bool)) map[string]bool {
	out := maps.Clone(inArgs)
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := getenv(rlsEnvName(f.Name)); ok {
			out[f.Name] = true
		}
	})
	return out
}

// finish completes c once its flags are parsed and checked: the
// reference's passwords, where neither an RLS_ variable nor a file gives
// one, and the report of where each setting came from.
func (a *refApplied) finish(c *settings, fs *flag.FlagSet, inArgs map[string]bool, getenv func(string) (string, bool), environ []string) {
	if _, ok := getenv("RLS_REDIS_PASSWORD"); !ok && c.store.auth.PasswordFile == "" && a.Password != nil {
		c.store.redis.Password = *a.Password
	} else {
		a.report.PasswordFrom = ""
	}
	if _, ok := getenv("RLS_REDIS_SENTINEL_PASSWORD"); !ok && c.store.auth.SentinelPasswordFile == "" && a.SentinelPassword != nil {
		c.store.redis.SentinelPassword = *a.SentinelPassword
	} else {
		a.report.SentinelPasswordFrom = ""
	}
	// Every setting an RLS_ or reference variable set is logged, and those
	// the reference's defaults set when they differ from ours.
	fs.VisitAll(func(f *flag.Flag) {
		if inArgs[f.Name] || (a.ByDefault[f.Name] && f.Value.String() == f.DefValue) {
			return
		}
		if _, ok := getenv(rlsEnvName(f.Name)); ok {
			a.report.From[f.Name] = rlsEnvName(f.Name)
		} else if vars, ok := a.ByFlag[f.Name]; ok {
			a.report.From[f.Name] = vars
		} else {
			return
		}
		a.report.Value[f.Name] = envlog.Value(f.Name, f.Value.String())
	})
	a.report.UnknownRLS = unknownRLS(fs, environ)
	a.report.RLSHints = rlsHints(fs, a.report.UnknownRLS)
	c.env = a.report
}

// noteRLS records the flags that their RLS_ variables set and the
// command line (inArgs) does not, for explain.
func (a *refApplied) noteRLS(fs *flag.FlagSet, inArgs map[string]bool, getenv func(string) (string, bool)) {
	a.byRLS = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := getenv(rlsEnvName(f.Name)); ok && !inArgs[f.Name] {
			a.byRLS[f.Name] = rlsEnvName(f.Name)
		}
	})
}

// explain adds to a settings error which of the flags it names got their
// values from an RLS_ variable or the reference's variables, which the
// user set, not the flags.
func (a *refApplied) explain(err error) error {
	var notes []string
	msg := err.Error()
	from := maps.Clone(a.ByFlag)
	maps.Copy(from, a.byRLS)
	for f, vars := range from {
		i := strings.Index(msg, "--"+f)
		for i >= 0 {
			end := i + 2 + len(f)
			if end == len(msg) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-", rune(msg[end])) {
				notes = append(notes, "--"+f+" is set from "+vars)
				break
			}
			next := strings.Index(msg[end:], "--"+f)
			if next < 0 {
				break
			}
			i = end + next
		}
	}
	if len(notes) == 0 {
		return err
	}
	sort.Strings(notes)
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}

// logEnv logs where the settings came from (see envlog.Report.Log), and
// a --redis-url that was host:port.
func logEnv(log *zap.Logger, c *settings) {
	c.env.Log(log)
	c.store.logURL(log)
}
