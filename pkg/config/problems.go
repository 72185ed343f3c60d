package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem in a rule file.
type Error struct {
	File string
	Line int    // 1-based; 0 if unknown
	Path string // YAML path, e.g. descriptors[2].rate_limit.unit
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// MaxProblems is how many problems a refused file set's error lists;
// the rest are counted in one more. The error goes to a log line and to
// /debug/config: a generated push with a mistake in every descriptor
// would otherwise make both as long as the push.
const MaxProblems = 100

// maxMessageBytes bounds one problem's message: a value quoted in it may
// be as long as a YAML scalar.
const maxMessageBytes = 1 << 10

// listed returns the first MaxProblems of errs, and one more that counts
// the rest in the file of the last one listed.
func listed(errs []error) []error {
	if len(errs) <= MaxProblems {
		return errs
	}
	file := ""
	if e, ok := errs[MaxProblems-1].(*Error); ok {
		file = e.File
	}
	return append(errs[:MaxProblems:MaxProblems], &Error{File: file, Msg: fmt.Sprintf("%d more problems not listed", len(errs)-MaxProblems)})
}

// Problems lists the problems in an error of Load or Parse: the parts of
// every errors.Join in it, in order. It returns nil for nil.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Problems(e)...)
	}
	return out
}

// cut shortens a message past maxMessageBytes, saying how much it left
// out.
func cut(msg string) string {
	if len(msg) <= maxMessageBytes {
		return msg
	}
	keep := maxMessageBytes
	for keep > 0 && !utf8.RuneStart(msg[keep]) {
		keep--
	}
	return fmt.Sprintf("%s... (%d more bytes)", msg[:keep], len(msg)-keep)
}
