package config

import (
	"errors"
	"regexp"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ParseGenerated is Parse for rule documents that a program rendered from
// another form, such as the RateLimitConfig resources of an xDS push, so
// that they pass exactly the checks rule files do. A line number would
// point into text nobody sees: its errors name the document (File.Name)
// and the YAML path, which is also the path of the source's fields, and
// no line; its rules have Line 0.
func ParseGenerated(files []File, opts Options) (*limits.Ruleset, error) {
	rs, err := Parse(files, opts)
	if err != nil {
		problems := Problems(err)
		lines := fileLines(files)
		for _, p := range problems {
			var e *Error
			if errors.As(p, &e) && len(files) > 0 {
				e.Line = 0
				// A message may point at another rule ("first at
				// file:line").
				e.Msg = lines.ReplaceAllString(e.Msg, "$1")
			}
		}
		return nil, errors.Join(problems...)
	}
	// The ruleset is not shared yet, and Line is only ever read for
	// messages.
	for _, d := range rs.Domains() {
		clearLines(rs.Rules(d))
	}
	return rs, nil
}

// fileLines matches "name:line" for the names of files, capturing the
// name.
func fileLines(files []File) *regexp.Regexp {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = regexp.QuoteMeta(f.Name)
	}
	return regexp.MustCompile("(" + strings.Join(names, "|") + `):\d+`)
}

func clearLines(rules []*limits.Rule) {
	for _, r := range rules {
		r.Line = 0
		clearLines(r.Children)
	}
}

// Checksum is the checksum that Parse records as Ruleset.Checksum for
// files, so that a caller can tell a file set it has seen, rejected or
// not, without parsing it again.
func Checksum(files []File) string { return checksum(files) }
