package statsd

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ddEnvTags are the variables a Datadog client turns into tags of every
// stat, in its order.
var ddEnvTags = []struct{ env, tag string }{
	{"DD_ENTITY_ID", "dd.internal.entity_id"}, {"DD_ENV", "env"}, {"DD_SERVICE", "service"}, {"DD_VERSION", "version"},
}

// DatadogEnvTags returns the global tags a Datadog client adds from the
// environment (Datadog's unified service tagging, and the pod's entity
// ID for origin detection), for Options.GlobalTags.
func DatadogEnvTags(getenv func(string) (string, bool)) []string {
	var out []string
	for _, e := range ddEnvTags {
		if v, ok := getenv(e.env); ok && v != "" {
			out = append(out, e.tag+":"+v)
		}
	}
	return out
}

// lineSafe replaces the control characters of a name, which a request's
// values (in a detailed_metric rule's names) may hold, with '_': a
// newline would end the line and start one of the client's making.
func lineSafe(name string) string {
	if !strings.ContainsFunc(name, unicode.IsControl) {
		return name
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '_'
		}
		return r
	}, name)
}

// nameChars replaces the characters that end a stat's name.
var nameChars = strings.NewReplacer(":", "_", "|", "_")

// replaceChars replaces the characters that the reference's client
// replaces in tag values.
var replaceChars = strings.NewReplacer(".", "_", ":", "_", "|", "_")

// formatTags is the suffix of every line's name (statsd) or line
// (DogStatsD) that carries tags, sorted by key.
func formatTags(f Format, tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		v := lineSafe(replaceChars.Replace(tags[k]))
		switch {
		case f == Statsd:
			b.WriteString(".__" + k + "=" + v)
		case i == 0:
			b.WriteString("|#" + k + ":" + v)
		default:
			b.WriteString("," + k + ":" + v)
		}
	}
	return b.String()
}

// joinTags adds DogStatsD tags (key:value) to a line's tag suffix.
func joinTags(suffix string, tags []string) string {
	if len(tags) == 0 {
		return suffix
	}
	if suffix == "" {
		return "|#" + strings.Join(tags, ",")
	}
	return suffix + "," + strings.Join(tags, ",")
}

// Mogrifier renames a DogStatsD stat whose name its pattern matches, and
// tags it: $0, $1, ... in Name and in the values of Tags are the match
// and its groups, as in the reference's DOG_STATSD_MOGRIFIER_* settings.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    map[string]string
}

var groupRef = regexp.MustCompile(`\$\d+`)

func expand(template string, match []string) string {
	return groupRef.ReplaceAllStringFunc(template, func(ref string) string {
		i, err := strconv.Atoi(ref[1:])
		if err != nil || i >= len(match) {
			return ref
		}
		return match[i]
	})
}

// apply returns the new name and the tags, sorted by key.
func (m Mogrifier) apply(match []string) (string, []string) {
	keys := make([]string, 0, len(m.Tags))
	for k := range m.Tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tags := make([]string, len(keys))
	for i, k := range keys {
		tags[i] = k + ":" + expand(m.Tags[k], match)
	}
	return expand(m.Name, match), tags
}

// CheckMogrifier reports what is missing from a mogrifier.
func CheckMogrifier(m Mogrifier) error {
	var errs []error
	if m.Pattern == nil {
		errs = append(errs, errors.New("no pattern"))
	}
	if m.Name == "" {
		errs = append(errs, errors.New("no name"))
	}
	for k, v := range m.Tags {
		if k == "" || v == "" {
			errs = append(errs, fmt.Errorf("tag %q: want a key and a value", k))
		}
	}
	return errors.Join(errs...)
}
