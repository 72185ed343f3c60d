package config

import (
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ParseGenerated is Parse for rule documents that a program rendered from
// another form, such as the RateLimitConfig resources of an xDS push, so
// that they pass exactly the checks rule files do. A line number would
// point into text nobody sees: its errors name the document (File.Name)
// and the YAML path, which is also the path of the source's fields, and
// no line, and so do messages that point at another rule; its rules have
// Line 0. Such a program may hand over its documents as YAML nodes
// (File.Root).
func ParseGenerated(files []File, opts Options) (*limits.Ruleset, error) {
	return parse(files, opts, true)
}

// Checksum is the checksum that Parse records as Ruleset.Checksum for
// files, so that a caller can tell a file set it has seen, rejected or
// not, without parsing it again.
func Checksum(files []File) string { return checksum(files) }
