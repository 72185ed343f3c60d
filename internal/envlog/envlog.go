// Package envlog is the start log of where the settings came from
// (refenv.Report): the RLS_ variables and envoyproxy/ratelimit's, beside
// the command line; the reference's settings in use that are not
// honoured; and RLS_ variables that no setting reads.
package envlog

import (
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
)

// Log logs where the settings that differ from their defaults came
// from, other than the command line, and warns once of the reference's
// settings in use that are not honoured and once of RLS_ variables that
// no setting reads.
func Log(log *zap.Logger, r *refenv.Report) {
	if r.RefMode {
		log.Info("run as " + refenv.Name + ": envoyproxy/ratelimit's defaults apply to settings not set")
	}
	if len(r.From) > 0 || r.PasswordFrom != "" || r.SentinelPasswordFrom != "" {
		log.Info("settings from the environment", zap.Object("settings", sources{r}))
	}
	if len(r.Refused) > 0 {
		log.Warn("envoyproxy/ratelimit settings not honoured", zap.Strings("settings", r.Refused))
	}
	if len(r.UnknownRLS) > 0 {
		fields := []zap.Field{zap.Strings("variables", r.UnknownRLS)}
		if len(r.RLSHints) > 0 {
			fields = append(fields, zap.Strings("did_you_mean", r.RLSHints))
		}
		log.Warn("RLS_ environment variables that no setting reads: misspelt?", fields...)
	}
}

// sources logs each setting from the environment as
// {"value": …, "from": …}; passwords are named, never shown.
type sources struct{ r *refenv.Report }

var _ zapcore.ObjectMarshaler = sources{}

func (e sources) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	r := e.r
	names := make([]string, 0, len(r.From))
	for name := range r.From {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := r.Value[name]
		from := r.From[name]
		err := enc.AddObject(name, zapcore.ObjectMarshalerFunc(func(enc zapcore.ObjectEncoder) error {
			enc.AddString("value", value)
			enc.AddString("from", from)
			return nil
		}))
		if err != nil {
			return err
		}
	}
	if r.PasswordFrom != "" {
		enc.AddString("redis password", "from "+r.PasswordFrom)
	}
	if r.SentinelPasswordFrom != "" {
		enc.AddString("redis sentinel password", "from "+r.SentinelPasswordFrom)
	}
	return nil
}
