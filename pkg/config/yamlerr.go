package config

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// yamlLine finds the line number in a yaml.v3 error message.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlParserProblems are the problems yaml.v3's parser (not its scanner)
// reports. For these it writes the 0-based line of its mark, one line
// before the line it means (the line of an unclosed '[' or '{', of the
// mapping or sequence that lacks a key or entry); when that mark is on
// the first line, the line of the problem instead, or none.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// yamlTabProblem is the scanner's problem with a tab in the indentation
// of a plain scalar's continuation: it gives the line where the scalar
// starts, not the tab's.
const yamlTabProblem = "found a tab character that violates indentation"

// yamlError records a YAML syntax error of the file data, moving its line
// number into the Error's, and putting it on the line the problem is on
// (yamlProblemLine).
func (p *parser) yamlError(err error, data []byte) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = err.Error()[len(m[0]):]
	}
	e := &Error{File: p.file, Msg: cut("invalid YAML: " + msg)}
	if !p.generated {
		e.Line = yamlProblemLine(msg, line, data)
	}
	p.errs = append(p.errs, e)
}

// yamlProblemLine is the 1-based line of data that yaml.v3's problem msg,
// reported at line (0: no line given), is on.
func yamlProblemLine(msg string, line int, data []byte) int {
	switch {
	case yamlParserProblems[msg]:
		// When the mark is on the first line, yaml.v3 falls back to
		// where it found the problem, which may be the end of the file,
		// after its last line.
		n := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			n++
		}
		return min(line+1, max(n, 1))
	case msg == yamlTabProblem:
		// The first line from the scalar's on whose indentation holds a tab.
		for i, l := range bytes.Split(data, []byte("\n")) {
			indent := l[:len(l)-len(bytes.TrimLeft(l, " \t"))]
			if i+1 > line && bytes.IndexByte(indent, '\t') >= 0 {
				return i + 1
			}
		}
		return max(line, 1)
	case line == 0 && strings.HasPrefix(msg, "found character that cannot start any token"):
		return 1 // the scanner's marks were on the first line
	}
	return line
}
