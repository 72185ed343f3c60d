package docs_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests in this file hold what the docs state about endpoints,
// addresses, defaults and the image to the code: a sentence that names
// where an endpoint is served, a flag's default, the image's addresses.

// TestDocsIndexListsEachPageOnce: docs/README.md has one entry per page.
func TestDocsIndexListsEachPageOnce(t *testing.T) {
	entry := regexp.MustCompile(`(?m)^- \[[^\]]+\]\(([a-z0-9-]+\.md)\)`)
	seen := map[string]int{}
	for _, m := range entry.FindAllStringSubmatch(readDoc(t, "docs/README.md"), -1) {
		seen[m[1]]++
	}
	if len(seen) < 10 {
		t.Fatalf("read %d entries from docs/README.md: its shape changed", len(seen))
	}
	for page, n := range seen {
		if n != 1 {
			t.Errorf("docs/README.md lists %s %d times", page, n)
		}
	}
}

// flagsTableRow returns the meaning cell of flag's row in docs/flags.md.
func flagsTableRow(t *testing.T, flag string) string {
	t.Helper()
	for line := range strings.SplitSeq(readDoc(t, "docs/flags.md"), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `--"+flag+"` |"); ok {
			cells := strings.Split(rest, "|")
			if len(cells) < 2 {
				t.Fatalf("docs/flags.md: the row of --%s has no meaning cell", flag)
			}
			return cells[1]
		}
	}
	t.Fatalf("docs/flags.md has no row for --%s", flag)
	return ""
}

// endpointPaths returns the HTTP paths a text names in backquotes, with
// or without a method: `/debug/config`, `POST /json`.
func endpointPaths(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`(?:(?:GET|POST) )?(/[a-z/]+)`").FindAllStringSubmatch(s, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestDocsAdminEndpoints starts the sidecar with --admin-addr, as the
// image runs it, and checks that every endpoint docs/flags.md places on
// --admin-addr is served there and not on --http-addr, that the
// --admin-addr flag's own help names them all, and that --http-addr
// serves those its row names before "unless".
func TestDocsAdminEndpoints(t *testing.T) {
	adminRow := flagsTableRow(t, "admin-addr")
	adminPaths := endpointPaths(strings.SplitN(adminRow, ";", 2)[0])
	httpRow := flagsTableRow(t, "http-addr")
	always, _, ok := strings.Cut(httpRow, "unless")
	if !ok || len(adminPaths) < 3 {
		t.Fatalf("docs/flags.md's rows of --http-addr and --admin-addr changed shape:\n%s\n%s", httpRow, adminRow)
	}
	var httpPaths []string // those on --http-addr whatever --admin-addr says
	for _, p := range endpointPaths(always) {
		if !slices.Contains(adminPaths, p) {
			httpPaths = append(httpPaths, p)
		}
	}

	usage := serverFlags(t)["admin-addr"].usage
	for _, p := range adminPaths {
		if !strings.Contains(usage, p) {
			t.Errorf("--admin-addr's help does not name %s, which docs/flags.md places on it: %q", p, usage)
		}
	}

	s := startSidecar(t, "--config", "../config", "--admin-addr", "127.0.0.1:0")
	served := func(addr, path string) bool {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusNotFound
	}
	for _, p := range adminPaths {
		if !served(s.adminAddr, p) {
			t.Errorf("docs/flags.md places %s on --admin-addr; it is not served there", p)
		}
		if served(s.httpAddr, p) {
			t.Errorf("docs/flags.md places %s on --admin-addr when it is set; --http-addr serves it too", p)
		}
	}
	for _, p := range httpPaths {
		if !served(s.httpAddr, p) {
			t.Errorf("docs/flags.md places %s on --http-addr; it is not served there", p)
		}
	}

	// A sentence that puts an admin endpoint on --http-addr must say
	// that it is so only without --admin-addr (as the image sets it).
	onHTTP := regexp.MustCompile("`(?:(?:GET|POST) )?(/[a-z/]+)` on `--http-addr`")
	for _, doc := range docFiles(t) {
		for _, l := range mdLines(readDoc(t, doc)) {
			for _, m := range onHTTP.FindAllStringSubmatch(l.text, -1) {
				if slices.Contains(adminPaths, m[1]) {
					t.Errorf("%s:%d: puts %s on --http-addr, where it is only without --admin-addr: %s", doc, l.n, m[1], l.text)
				}
			}
		}
	}
}

// flagRow is a row of docs/flags.md's tables: its first cell names one
// or more flags, its second holds their default.
var flagRow = regexp.MustCompile("(?m)^\\| (`--[a-z0-9-]+`(?:, `--[a-z0-9-]+`)*) \\|([^|]*)\\|")

// flagName is a flag named in flagRow's first cell.
var flagName = regexp.MustCompile("`--([a-z0-9-]+)`")

// TestFlagsDocumented: docs/flags.md has a row for every flag of the
// server (as help lists them) and for nothing else, and a bool flag's
// default reads false or true there and no other flag's does. The k8s
// tests read the flags from that page (their module cannot run this
// one's code), so the page is the checked list of them.
func TestFlagsDocumented(t *testing.T) {
	defaults := map[string]string{}
	for _, row := range flagRow.FindAllStringSubmatch(readDoc(t, "docs/flags.md"), -1) {
		for _, n := range flagName.FindAllStringSubmatch(row[1], -1) {
			defaults[n[1]] = row[2]
		}
	}
	if len(defaults) < 50 {
		t.Fatalf("read %d flags from docs/flags.md: the table's shape changed", len(defaults))
	}
	for name, f := range serverFlags(t) {
		def, ok := defaults[name]
		if !ok {
			t.Errorf("docs/flags.md has no row for --%s", name)
			continue
		}
		delete(defaults, name)
		if got := def == " false " || def == " true "; got != f.isBool {
			t.Errorf("docs/flags.md: --%s's default reads %q; a bool flag's, and only a bool flag's, reads false or true", name, def)
		}
	}
	for name := range defaults {
		t.Errorf("docs/flags.md has a row for --%s, which is no flag", name)
	}
}

// TestDocsFlagDefaults: the default docs/flags.md gives each flag is the
// one the flag has, as help prints it.
func TestDocsFlagDefaults(t *testing.T) {
	doc := readDoc(t, "docs/flags.md")
	documented := map[string]string{}
	for _, row := range flagRow.FindAllStringSubmatch(doc, -1) {
		for _, n := range flagName.FindAllStringSubmatch(row[1], -1) {
			documented[n[1]] = strings.TrimSpace(row[2])
		}
	}
	checked := 0
	for name, f := range serverFlags(t) {
		def, ok := documented[name]
		if !ok {
			continue // TestFlagsDocumented reports it
		}
		checked++
		if why, ok := defaultProse[name]; ok {
			if def != why {
				t.Errorf("docs/flags.md: --%s's default reads %q; the test expects %q (update both)", name, def, why)
			}
			continue
		}
		got := strings.Trim(def, "`")
		if d, err := time.ParseDuration(f.def); err == nil {
			// Written as people write durations: 0, 1m, 30m.
			if dd, err := time.ParseDuration(got); err == nil && dd == d || got == "0" && d == 0 {
				continue
			}
		}
		if got != f.def {
			t.Errorf("docs/flags.md: --%s's default reads %q; the flag's is %q", name, def, f.def)
		}
	}
	if checked < 50 {
		t.Errorf("checked %d defaults: docs/flags.md's table changed shape", checked)
	}
}

// defaultProse are the defaults docs/flags.md writes in words, not as the
// flag's value, because the value alone would mislead.
var defaultProse = map[string]string{}

// TestDocsImage: what README.md and docs/deploying.md say the image
// listens on and is built from is the Dockerfile's.
func TestDocsImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entry []string
	var base string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(v), &entry); err != nil {
				t.Fatal(err)
			}
		}
		if v, ok := strings.CutPrefix(l, "FROM "); ok && !strings.Contains(v, " AS ") {
			base = v
		}
	}
	addrs := map[string]string{}
	for _, a := range entry {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasSuffix(k, "-addr") {
			addrs[k] = v
		}
	}
	if len(addrs) != 3 || base == "" {
		t.Fatalf("Dockerfile: entrypoint addresses %v, base %q: its shape changed", addrs, base)
	}
	for _, doc := range []string{"README.md", "docs/deploying.md"} {
		text := readDoc(t, doc)
		for k, v := range addrs {
			if !strings.Contains(text, "`"+v+"`") {
				t.Errorf("%s does not say the image's --%s, `%s`", doc, k, v)
			}
		}
	}
	if strings.Contains(base, "distroless") != strings.Contains(readDoc(t, "docs/deploying.md"), "distroless") {
		t.Errorf("docs/deploying.md and the Dockerfile's base (%s) disagree on distroless", base)
	}
	if rel := readDoc(t, "docs/releasing.md"); !strings.Contains(rel, "no base image") || !strings.Contains(rel, base) {
		t.Errorf("docs/releasing.md must say that make release's image has no base image and the Dockerfile's is %s", base)
	}
}
