// Package docs_test keeps README.md, the pages under docs/ and the READMEs
// of examples/, k8s/ and charts/ true to the code. It holds only tests,
// beside the pages they check, and checks them against the sidecar's
// binary (built once per run; see sidecar_test.go), as its users run it.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// This file reads the Markdown: every relative link resolves to a file,
// and every #anchor to a heading of it; README.md stays a front page that
// links the index of docs/, which links every page.

// repoRoot is the repository's root, seen from this package.
const repoRoot = ".."

// readmeMaxLines is the most lines README.md may have: it is the front
// page, and long-form text belongs in docs/ (issue 18).
const readmeMaxLines = 500

// pendingLinks are link targets that other branches add and this one
// links to ahead of them. They may be missing; once present they are
// checked like any other. Remove an entry when its file has landed.
var pendingLinks = map[string]string{}

// docFiles returns the Markdown files whose links and flags are checked,
// relative to the repository's root: README.md, every page under docs/,
// and the READMEs of examples/, k8s/ and charts/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "k8s/README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(repoRoot, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"examples/*/README.md", "charts/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(repoRoot, p)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	return files
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdLine is one line of a Markdown file, with whether it is inside a
// fenced code block and that block's info string.
type mdLine struct {
	n      int // 1-based
	text   string
	fenced bool
	info   string // the fence's info string, e.g. "sh" or "console"
}

// mdLines splits text into lines and marks the fenced ones. The fence
// lines themselves count as fenced.
func mdLines(text string) []mdLine {
	var out []mdLine
	fence := "" // the opening fence while inside a block
	info := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			info = strings.TrimSpace(strings.TrimLeft(trimmed, "`~"))
			out = append(out, mdLine{n: i + 1, text: line, fenced: true, info: info})
		case fence != "" && strings.HasPrefix(trimmed, fence):
			out = append(out, mdLine{n: i + 1, text: line, fenced: true, info: info})
			fence, info = "", ""
		default:
			out = append(out, mdLine{n: i + 1, text: line, fenced: fence != "", info: info})
		}
	}
	return out
}

var (
	headingRE  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlIDRE   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	linkRE     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE   = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
)

// githubSlug is the anchor GitHub gives a heading: the heading's text
// (links reduced to their text, code spans to their code) in lower case,
// with every character that is not a letter, mark, digit, '_', '-' or
// space dropped, and spaces turned into '-'.
func githubSlug(heading string) string {
	heading = linkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of text's headings, numbered as GitHub
// numbers repeats ("x", "x-1", "x-2"), and of its <a name|id> tags.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range mdLines(text) {
		if l.fenced {
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// mdLink is a link of a Markdown file: its target as written.
type mdLink struct {
	line   int
	target string
}

// links returns the links of text outside code: inline links and images,
// and reference definitions.
func links(text string) []mdLink {
	var out []mdLink
	for _, l := range mdLines(text) {
		if l.fenced {
			continue
		}
		if m := refDefRE.FindStringSubmatch(l.text); m != nil {
			out = append(out, mdLink{l.n, m[1]})
			continue
		}
		prose := codeSpanRE.ReplaceAllString(l.text, "``")
		for _, m := range linkRE.FindAllStringSubmatch(prose, -1) {
			out = append(out, mdLink{l.n, m[2]})
		}
	}
	return out
}

// linkProblem says what is wrong with the link target of the file doc
// (relative to the root), or "" if it resolves: a relative path must name
// a file or directory inside the repository, and a #fragment a heading of
// the Markdown file it points into. Links with a scheme are not checked.
func linkProblem(root, doc, target string, pending map[string]string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	file := doc
	if path != "" {
		file = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
	}
	if file == ".." || strings.HasPrefix(file, "../") || filepath.IsAbs(path) {
		return "points outside the repository"
	}
	info, err := os.Stat(filepath.Join(root, file))
	if err != nil {
		if _, ok := pending[file]; ok {
			return ""
		}
		return "no such file: " + file
	}
	if frag == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(file, ".md") {
		return "#" + frag + " on " + file + ", which is not a Markdown file"
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return err.Error()
	}
	if !anchors(string(b))[frag] {
		return "no heading in " + file + " has the anchor #" + frag
	}
	return ""
}

// TestDocsLinks checks every relative link of README.md and the docs:
// its file exists, and its #anchor is a heading there.
func TestDocsLinks(t *testing.T) {
	for _, doc := range docFiles(t) {
		for _, l := range links(readDoc(t, doc)) {
			if p := linkProblem(repoRoot, doc, l.target, pendingLinks); p != "" {
				t.Errorf("%s:%d: link %s: %s", doc, l.line, l.target, p)
			}
		}
	}
}

// TestDocsPagesLinked checks that README.md stays short and that every
// page under docs/ can be found: README.md links docs/README.md, the
// index, which links every other page.
func TestDocsPagesLinked(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(strings.TrimRight(readme, "\n"), "\n") + 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move long-form text into a page under docs/", n, readmeMaxLines)
	}
	if strings.Contains(readme, "../shared") {
		t.Errorf("README.md mentions ../shared, which is not part of the repository")
	}
	linked := func(doc string) map[string]bool {
		out := map[string]bool{}
		for _, l := range links(readDoc(t, doc)) {
			path, _, _ := strings.Cut(l.target, "#")
			if path != "" && !strings.Contains(path, "://") {
				out[filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))] = true
			}
		}
		return out
	}
	if !linked("README.md")["docs/README.md"] {
		t.Errorf("README.md does not link docs/README.md, the index of the docs")
	}
	index := linked("docs/README.md")
	for _, doc := range docFiles(t) {
		// One title per page: a second "# " heading is a section moved
		// from another page at the wrong level.
		var titles []int
		for _, l := range mdLines(readDoc(t, doc)) {
			if !l.fenced && strings.HasPrefix(l.text, "# ") {
				titles = append(titles, l.n)
			}
		}
		if len(titles) != 1 || titles[0] != 1 {
			t.Errorf("%s: level-1 headings at lines %v, want one, at line 1", doc, titles)
		}
		if strings.HasPrefix(doc, "docs/") && doc != "docs/README.md" && !index[doc] {
			t.Errorf("docs/README.md does not link %s", doc)
		}
	}
}

func TestGithubSlug(t *testing.T) {
	tests := []struct{ give, want string }{
		{"Quick start", "quick-start"},
		{"Replacing envoyproxy/ratelimit in Envoy Gateway", "replacing-envoyproxyratelimit-in-envoy-gateway"},
		{"Why was this request rejected?", "why-was-this-request-rejected"},
		{"Metric series of `detailed_metric` rules", "metric-series-of-detailed_metric-rules"},
		{"Per-request limits and their counters (`--override-keys`)", "per-request-limits-and-their-counters---override-keys"},
		{"Metrics & alerts", "metrics--alerts"},
		{"See [the docs](docs/README.md)", "see-the-docs"},
	}
	for _, tt := range tests {
		if got := githubSlug(tt.give); got != tt.want {
			t.Errorf("githubSlug(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestAnchorsAndLinks(t *testing.T) {
	const text = "# Title\n\n## Part\n\n```sh\n# not a heading\n[no](link.md)\n```\n\n## Part\n\nSee [a](#part-1), `[b](code.md)` and [c](x.md#y \"t\").\n\n[d]: other.md\n"
	wantAnchors := []string{"part", "part-1", "title"}
	got := slices.Sorted(mapKeys(anchors(text)))
	if !slices.Equal(got, wantAnchors) {
		t.Errorf("anchors = %v, want %v", got, wantAnchors)
	}
	wantLinks := []mdLink{{12, "#part-1"}, {12, "x.md#y"}, {14, "other.md"}}
	if gl := links(text); !slices.Equal(gl, wantLinks) {
		t.Errorf("links = %v, want %v", gl, wantLinks)
	}
}

func TestLinkProblem(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"README.md":      "# Top\n\n## Quick start\n",
		"docs/redis.md":  "# Redis\n\n## Deny cache\n",
		"docs/notes.txt": "text",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pending := map[string]string{"LICENSE": "later"}
	tests := []struct {
		doc, give, want string
	}{
		{"README.md", "docs/redis.md#deny-cache", ""},
		{"README.md", "#quick-start", ""},
		{"README.md", "https://example.com/x#y", ""},
		{"README.md", "LICENSE", ""},
		{"README.md", "docs/", ""},
		{"docs/redis.md", "../README.md#quick-start", ""},
		{"docs/redis.md", "#deny-cache", ""},
		{"README.md", "docs/redis.md#failure-modes", "no heading in docs/redis.md has the anchor #failure-modes"},
		{"README.md", "#deny-cache", "no heading in README.md has the anchor #deny-cache"},
		{"README.md", "docs/algorithms.md", "no such file: docs/algorithms.md"},
		{"docs/redis.md", "redis-failover.md", "no such file: docs/redis-failover.md"},
		{"README.md", "../shared/STYLE.md", "points outside the repository"},
		{"README.md", "docs/notes.txt#x", "#x on docs/notes.txt, which is not a Markdown file"},
	}
	for _, tt := range tests {
		if got := linkProblem(root, tt.doc, tt.give, pending); got != tt.want {
			t.Errorf("%s: link %s: %q, want %q", tt.doc, tt.give, got, tt.want)
		}
	}
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
