package main

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// loggedError is an error that ends the program, already logged.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// logFatal logs err, which ends serve, at Error in the log's format.
// With --log-format json it returns err as a loggedError, so that main
// writes no plain line among the JSON ones; a console log keeps the
// plain line, for whoever reads the terminal.
func logFatal(log *zap.Logger, format string, err error) error {
	if re := (*rulesError)(nil); errors.As(err, &re) {
		// A line for each problem: one error of many lines is one
		// unreadable line of \n escapes in either log format.
		for _, p := range re.problems {
			log.Error("invalid rules", problemFields(p)...)
		}
		log.Error("ratelimit-sidecar stopped on an error", zap.String("error", re.summary()))
	} else {
		log.Error("ratelimit-sidecar stopped on an error", zap.Error(err))
	}
	if format == "console" {
		return err
	}
	return loggedError{err}
}

// rulesError is the error of rules that cannot be loaded at start: each
// problem (a *config.Error names its file and line), so that the log can
// give each a line of its own. Its text is all of them, a line each, for
// a terminal.
type rulesError struct {
	problems []error
	hint     string // what to do, after the problems
}

func (e *rulesError) Error() string {
	return "invalid config:\n" + errors.Join(e.problems...).Error() + e.hint
}

func (e *rulesError) Unwrap() []error { return e.problems }

// summary is the error in one line: how many problems there are.
func (e *rulesError) summary() string {
	if len(e.problems) == 1 {
		return "invalid config: 1 problem, logged above" + e.hint
	}
	return fmt.Sprintf("invalid config: %d problems, each logged above%s", len(e.problems), e.hint)
}

// problemFields are the log fields of one problem of a rulesError: the
// whole text, and the file and line of a *config.Error.
func problemFields(p error) []zap.Field {
	fields := []zap.Field{zap.String("problem", p.Error())}
	if ce := (*config.Error)(nil); errors.As(p, &ce) {
		fields = append(fields, zap.String("file", ce.File))
		if ce.Line > 0 {
			fields = append(fields, zap.Int("line", ce.Line))
		}
	}
	return fields
}
