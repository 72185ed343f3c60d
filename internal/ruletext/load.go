// Package ruletext is how the check and explain commands show rules to
// people: the problems of rules that do not load, the tree of the rules
// of each domain, and how descriptors match them.
//
// The text is for people, not programs: it may change between releases.
package ruletext

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// Load loads the rules at path as the server does (config.Load). If they
// are invalid it writes every problem to w, one a line (file:line: path:
// reason), and returns an error that counts them. An error that is not a
// problem in the rules (a missing path, config.ErrNoRules) it returns as
// it is, and writes nothing.
func Load(path string, opts config.Options, w io.Writer) (*limits.Ruleset, error) {
	rs, err := config.Load(path, opts)
	if err == nil {
		return rs, nil
	}
	n, err := writeProblems(w, err)
	if n == 0 {
		return nil, err
	}
	return nil, fmt.Errorf("invalid config %s: %s", path, plural(n, "problem"))
}

// LoadOverlay previews the rules a push of the RateLimitConfigs at path
// makes with the overlay file overlay, as the xDS client would make them.
// An overlay entry that matches nothing fails, as a problem in the rules
// does: Load's rules for problems and other errors apply.
func LoadOverlay(path, overlay string, opts config.Options, w io.Writer) (*limits.Ruleset, error) {
	ov, err := config.LoadOverlay(overlay)
	if err == nil {
		var resources []*anypb.Any
		if resources, err = xds.ReadConfigs(path); err == nil {
			var rs *limits.Ruleset
			var unmatched []error
			if rs, unmatched, err = xds.Preview(resources, ov, opts); err == nil && len(unmatched) == 0 {
				return rs, nil
			}
			err = errors.Join(append(unmatched, err)...)
		}
	}
	n, err := writeProblems(w, err)
	if n == 0 {
		return nil, err
	}
	return nil, fmt.Errorf("%s with overlay %s: %s", path, overlay, plural(n, "problem"))
}

// writeProblems writes each problem in the rules that err holds to w, one
// a line, and returns how many; none, and err itself, if err is not a
// problem in the rules.
func writeProblems(w io.Writer, err error) (int, error) {
	if !errors.As(err, new(*config.Error)) {
		return 0, err
	}
	problems := config.Problems(err)
	for _, p := range problems {
		fmt.Fprintln(w, p)
	}
	return len(problems), err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
