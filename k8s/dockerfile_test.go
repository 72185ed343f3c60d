package k8s_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// The repository root holds the Dockerfile and is its build context.
const repoRoot = ".."

// With no Docker engine in CI, the Dockerfile is checked by reading it with
// BuildKit's own parser, and its build stage is rehearsed: the context is
// assembled as BuildKit would send it (.dockerignore applied), the stage's
// COPYs are replayed, and Go is asked whether the sidecar's packages are
// all there. Building the binary itself would take a minute on a cold
// cache, and CI already builds it, for each release platform, with the
// same command (`make release` runs `make build`'s go build).
func TestDockerfile(t *testing.T) {
	df, ignore := readDockerfile(t)
	if err := checkDockerfile(t, df, ignore); err != nil {
		t.Error(err)
	}
}

func TestBrokenDockerfilesFail(t *testing.T) {
	tests := []struct {
		name       string
		old, new   string // in the Dockerfile
		ignoreTail string // added to .dockerignore
		want       string
	}{
		{
			name: "one stage",
			old:  "FROM gcr.io/distroless/static-debian12:nonroot\n",
			new:  "",
			want: "want at least 2 stages",
		},
		{
			name: "root user",
			old:  "USER 65532:65532", new: "USER 0",
			want: `final stage runs as "0": want a non-root numeric user`,
		},
		{
			name: "named user",
			old:  "USER 65532:65532", new: "USER nonroot",
			want: `final stage runs as "nonroot": want a non-root numeric user`,
		},
		{
			name: "no user",
			old:  "USER 65532:65532\n", new: "",
			want: "final stage has no USER",
		},
		{
			name: "not distroless",
			old:  "gcr.io/distroless/static-debian12:nonroot", new: "debian:12",
			want: `final stage is FROM "debian:12"`,
		},
		{
			name: "a build that is not make build",
			old:  "target=/root/.cache/go-build make build",
			new:  "target=/root/.cache/go-build go build -o bin/ratelimit-sidecar ./cmd/ratelimit-sidecar",
			want: `stage "build" does not RUN make build`,
		},
		{
			name: "copy of a missing path",
			old:  "COPY pkg/ pkg/", new: "COPY pkgs/ pkg/",
			want: "COPY pkgs/: not in the repository",
		},
		{
			name:       "copy of an ignored path",
			ignoreTail: "config/\n",
			want:       "COPY config/: excluded by .dockerignore",
		},
		{
			name: "binary copied from elsewhere",
			old:  "/src/bin/ratelimit-sidecar /usr", new: "/src/ratelimit-sidecar /usr",
			want: "COPY --from=build /src/ratelimit-sidecar: make build writes /src/bin/ratelimit-sidecar",
		},
		{
			name: "copy from an unknown stage",
			old:  "--from=build", new: "--from=builder",
			want: `COPY --from=builder: no earlier stage "builder"`,
		},
		{
			name: "context missing a package",
			old:  "COPY internal/ internal/\n", new: "",
			want: "internal/metrics",
		},
		{
			name:       "context missing an embedded file",
			ignoreTail: "**/*.lua\n",
			want:       "no matching files found",
		},
		{
			name: "shell-form entrypoint",
			old:  `ENTRYPOINT ["/usr/local/bin/ratelimit-sidecar", "--config=/etc/ratelimit-sidecar/", "--grpc-addr=0.0.0.0:8081", "--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"]`,
			new:  `ENTRYPOINT /usr/local/bin/ratelimit-sidecar --config=/etc/ratelimit-sidecar/`,
			want: "ENTRYPOINT must be in exec (JSON) form",
		},
		{
			name: "entrypoint with an unknown flag",
			old:  `"--http-addr=0.0.0.0:8080"`, new: `"--http-address=0.0.0.0:8080"`,
			want: "ENTRYPOINT: unknown flag --http-address",
		},
		{
			name: "entrypoint listening on loopback",
			old:  `"--http-addr=0.0.0.0:8080"`, new: `"--http-addr=127.0.0.1:8080"`,
			want: "ENTRYPOINT: --http-addr=127.0.0.1:8080 is loopback, unreachable from outside the container",
		},
		{
			name: "entrypoint reading rules from elsewhere",
			old:  `"--config=/etc/ratelimit-sidecar/"`, new: `"--config=/etc/rules/"`,
			want: "ENTRYPOINT: --config=/etc/rules/, but the default rules are copied to /etc/ratelimit-sidecar",
		},
		{
			name: "no licence label",
			old:  `org.opencontainers.image.licenses="Apache-2.0"`, new: `org.opencontainers.image.vendor="us"`,
			want: "final stage has no LABEL org.opencontainers.image.licenses",
		},
		{
			name: "a version label that is not the build's",
			old:  `org.opencontainers.image.version="$VERSION"`, new: `org.opencontainers.image.version="dev"`,
			want: `LABEL org.opencontainers.image.version="dev": want "$VERSION"`,
		},
		{
			name: "the version argument not declared in the final stage",
			old:  "nonroot\n# Build arguments end with their stage: the labels need them again.\nARG VERSION=dev\n", new: "nonroot\n",
			want: "final stage: LABEL uses $VERSION, but no ARG VERSION precedes it there",
		},
		{
			name: "no licence in the image",
			old:  "COPY LICENSE NOTICE /usr/share/doc/ratelimit-sidecar/\n", new: "",
			want: "final stage does not COPY LICENSE",
		},
	}
	df, ignore := readDockerfile(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(df, []byte(tt.old)) {
				t.Fatalf("Dockerfile does not contain %q", tt.old)
			}
			broken := bytes.Replace(df, []byte(tt.old), []byte(tt.new), 1)
			err := checkDockerfile(t, broken, append(bytes.Clone(ignore), tt.ignoreTail...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkDockerfile: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestMakefileBuild: `make build`, what the image runs, is the static
// build with the version and commit.
func TestMakefileBuild(t *testing.T) {
	if _, err := buildOutput(makeDryRun(t, "build", "GOOS=", "GOARCH=")); err != nil {
		t.Fatal(err)
	}
}

// TestMakefileRelease: `make release` builds every release platform with
// `make build`'s command, writes SHA256SUMS of them, and checks it. CI
// (.ci/run) runs it for real; here make only says what it would run.
func TestMakefileRelease(t *testing.T) {
	if err := checkRelease(makeDryRun(t, "release")); err != nil {
		t.Fatal(err)
	}
}

// TestBrokenReleasesFail: checkRelease notices a release that lacks a
// platform, the version, the checksums or their check.
func TestBrokenReleasesFail(t *testing.T) {
	good := makeDryRun(t, "release")
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"no arm64", "GOARCH=arm64", "GOARCH=amd64", "no build of bin/ratelimit-sidecar-linux-arm64 for linux/arm64"},
		{"not static", "CGO_ENABLED=0 ", "", "bin/ratelimit-sidecar-linux-amd64: build does not set CGO_ENABLED=0"},
		{"no version", "-X main.version=rehearsal", "", "the version is not set with -X main.version="},
		{"no sums", "> SHA256SUMS", "", "no sha256sum of both binaries into bin/SHA256SUMS"},
		{"sums unchecked", "--check", "", "SHA256SUMS is not checked (sha256sum --check)"},
		{"no image", "go run ./release", "true", "the image, SBOMs and chart (k8s/release) are not built"},
		{"image unsummed", "$(sed 's|^../bin/||' .artefacts)", "", "the image, SBOMs and chart (k8s/release) are not built, or not in SHA256SUMS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("make -n release does not say %q:\n%s", tt.old, good)
			}
			err := checkRelease(strings.ReplaceAll(good, tt.old, tt.new))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("checkRelease: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// makeDryRun returns what `make -n target` would run in the repository,
// with the version and commit set (so that no git runs) and vars added.
func makeDryRun(t *testing.T, target string, vars ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"-n", "--no-print-directory", target, "VERSION=rehearsal", "REVISION=0123456789abcdef"}, vars...)
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Dir, cmd.Env = repoRoot, cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cleanEnv is the environment for go and make: no flags or variables of
// an outer make (make test runs these tests), nothing that could fetch.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOFLAGS", "VERSION", "REVISION", "GOOS", "GOARCH":
		default:
			env = append(env, kv)
		}
	}
	return append(env, "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
}

// goBuilds returns the go build commands of make -n's output, by the
// path each writes.
func goBuilds(dryRun string) map[string]string {
	builds := map[string]string{}
	for _, line := range strings.Split(dryRun, "\n") {
		if !strings.Contains(line, "go build") {
			continue
		}
		if m := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(line); m != nil {
			builds[m[1]] = line
		}
	}
	return builds
}

// checkBuild checks that a go build command is the static build, with
// the version and commit.
func checkBuild(out, line string) []error {
	var errs []error
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags"} {
		if !strings.Contains(line, want) {
			errs = append(errs, fmt.Errorf("Makefile: %s: build does not set %s", out, want))
		}
	}
	if !strings.Contains(line, "-X main.version=rehearsal") {
		errs = append(errs, fmt.Errorf("Makefile: %s: the version is not set with -X main.version=", out))
	}
	if !strings.Contains(line, "-X main.revision=0123456789abcdef") {
		errs = append(errs, fmt.Errorf("Makefile: %s: the commit is not set with -X main.revision=", out))
	}
	return errs
}

// buildOutput checks what `make -n build` runs: one static build, whose
// path it returns.
func buildOutput(dryRun string) (string, error) {
	builds := goBuilds(dryRun)
	if len(builds) != 1 {
		return "", fmt.Errorf("Makefile: make build runs %d go builds, want 1:\n%s", len(builds), dryRun)
	}
	for out, line := range builds {
		if strings.Contains(line, "GOOS=") || strings.Contains(line, "GOARCH=") {
			return "", fmt.Errorf("Makefile: make build sets GOOS or GOARCH, which the image's build takes from the environment: %s", line)
		}
		return out, errors.Join(checkBuild(out, line)...)
	}
	panic("unreachable")
}

// checkRelease checks what `make -n release` runs: a static build for
// each platform, then SHA256SUMS of the binaries, checked.
func checkRelease(dryRun string) error {
	var errs []error
	builds := goBuilds(dryRun)
	var bins []string
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		goos, goarch, _ := strings.Cut(p, "/")
		out := "bin/ratelimit-sidecar-" + goos + "-" + goarch
		bins = append(bins, path.Base(out))
		line, ok := builds[out]
		if !ok || !strings.Contains(line, "GOOS="+goos+" ") || !strings.Contains(line, "GOARCH="+goarch+" ") {
			errs = append(errs, fmt.Errorf("Makefile: make release: no build of %s for %s", out, p))
			continue
		}
		errs = append(errs, checkBuild(out, line)...)
	}
	sums := regexp.MustCompile(`(?m)^cd bin && sha256sum (.+) > SHA256SUMS$`).FindStringSubmatch(dryRun)
	// The binaries first, then what k8s/release wrote (the image, SBOMs,
	// chart), which it lists.
	if sums == nil || !strings.HasPrefix(strings.Join(strings.Fields(sums[1]), " ")+" ", strings.Join(bins, " ")+" ") {
		errs = append(errs, fmt.Errorf("Makefile: make release: no sha256sum of both binaries into bin/SHA256SUMS:\n%s", dryRun))
	}
	if !regexp.MustCompile(`(?m)^cd k8s && \S+ run \./release .*-version rehearsal .*> \.\./bin/\.artefacts$`).MatchString(dryRun) ||
		sums == nil || !strings.Contains(sums[1], ".artefacts") {
		errs = append(errs, errors.New("Makefile: make release: the image, SBOMs and chart (k8s/release) are not built, or not in SHA256SUMS"))
	}
	if !regexp.MustCompile(`(?m)^cd bin && sha256sum --check\b.* SHA256SUMS$`).MatchString(dryRun) {
		errs = append(errs, errors.New("Makefile: make release: SHA256SUMS is not checked (sha256sum --check)"))
	}
	return errors.Join(errs...)
}

func readDockerfile(t *testing.T) (dockerfile, dockerignore []byte) {
	t.Helper()
	df, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	return df, ignore
}

// instruction is one Dockerfile instruction.
type instruction struct {
	cmd   string // lower case: from, run, copy, …
	flags map[string]string
	args  []string
	json  bool
	line  int
}

// stage is one FROM and what follows it.
type stage struct {
	name, image string
	body        []instruction
}

func parseStages(dockerfile []byte) ([]stage, error) {
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return nil, err
	}
	var stages []stage
	for _, n := range res.AST.Children {
		in := instruction{cmd: strings.ToLower(n.Value), flags: map[string]string{}, json: n.Attributes["json"], line: n.StartLine}
		for _, f := range n.Flags {
			k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			in.flags[k] = v
		}
		for x := n.Next; x != nil; x = x.Next {
			in.args = append(in.args, x.Value)
		}
		if in.cmd == "from" {
			s := stage{image: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "as") {
				s.name = in.args[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			continue // ARG before the first FROM
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return stages, nil
}

// releaseOutput checks that `make release` is the static build the image
// needs, and returns the path it writes the binary to.
func releaseOutput(makefile []byte) (string, error) {
	text := string(makefile)
	if !regexp.MustCompile(`(?m)^release:.*\bbuild\b`).MatchString(text) {
		return "", errors.New("Makefile: no release target that depends on build")
	}
	recipe := regexp.MustCompile(`(?m)^build:.*\n((?:\t.*\n)+)`).FindStringSubmatch(text)
	if recipe == nil {
		return "", errors.New("Makefile: no build target")
	}
	var errs []error
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags"} {
		if !strings.Contains(recipe[1], want) {
			errs = append(errs, fmt.Errorf("Makefile: build does not set %s", want))
		}
	}
	if !strings.Contains(text, "-X main.version=") {
		errs = append(errs, errors.New("Makefile: the version is not set with -X main.version="))
	}
	out := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(recipe[1])
	if out == nil {
		errs = append(errs, errors.New("Makefile: build has no -o"))
		return "", errors.Join(errs...)
	}
	return out[1], errors.Join(errs...)
}

func checkDockerfile(t *testing.T, dockerfile, dockerignore []byte) error {
	t.Helper()
	stages, err := parseStages(dockerfile)
	if err != nil {
		return fmt.Errorf("parse Dockerfile: %w", err)
	}
	if len(stages) < 2 {
		return fmt.Errorf("Dockerfile: %d stage(s): want at least 2 stages, a Go build and a distroless runtime", len(stages))
	}
	patterns, err := ignorefile.ReadAll(bytes.NewReader(dockerignore))
	if err != nil {
		return fmt.Errorf(".dockerignore: %w", err)
	}
	ignored, err := patternmatcher.New(patterns)
	if err != nil {
		return fmt.Errorf(".dockerignore: %w", err)
	}
	binOut, err := buildOutput(makeDryRun(t, "build", "GOOS=", "GOARCH="))
	if err != nil {
		return err
	}

	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("Dockerfile: "+format, a...)) }
	workdirs := map[string]string{} // stage name → its WORKDIR
	names := map[string]bool{}
	var final stage
	for i, s := range stages {
		workdir := "/"
		for _, in := range s.body {
			switch in.cmd {
			case "workdir":
				workdir = path.Join(workdir, in.args[0])
			case "copy", "add":
				from, hasFrom := in.flags["from"]
				srcs := in.args[:len(in.args)-1]
				for _, src := range srcs {
					switch {
					case hasFrom && !names[from]:
						fail("line %d: COPY --from=%s: no earlier stage %q", in.line, from, from)
					case hasFrom:
						want := path.Join(workdirs[from], binOut)
						if path.Clean(src) != want {
							fail("line %d: COPY --from=%s %s: make build writes %s", in.line, from, src, want)
						}
					default:
						if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
							fail("line %d: COPY %s: not in the repository", in.line, src)
						} else if m, _ := ignored.MatchesOrParentMatches(path.Clean(src)); m {
							fail("line %d: COPY %s: excluded by .dockerignore, so not in the build context", in.line, src)
						}
					}
				}
			}
		}
		if s.name != "" {
			names[s.name] = true
			workdirs[s.name] = workdir
		}
		if i == len(stages)-1 {
			final = s
		}
	}

	// The runtime: distroless static, as a numeric non-root user (the
	// kubelet can only check runAsNonRoot against a number).
	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") || !strings.HasSuffix(final.image, ":nonroot") {
		fail("final stage is FROM %q: want gcr.io/distroless/static…:nonroot", final.image)
	}
	user := ""
	for _, in := range final.body {
		if in.cmd == "user" {
			user = in.args[0]
		}
	}
	if user == "" {
		fail("final stage has no USER")
	} else if uid, gid, _ := strings.Cut(user, ":"); !nonRootID(uid) || (gid != "" && !nonRootID(gid)) {
		fail("final stage runs as %q: want a non-root numeric user, such as 65532:65532", user)
	}

	// The stage the binary comes from runs exactly `make build`.
	var build *stage
	for _, in := range final.body {
		if from, ok := in.flags["from"]; ok && in.cmd == "copy" {
			for i := range stages {
				if stages[i].name == from {
					build = &stages[i]
				}
			}
		}
	}
	switch {
	case build == nil:
		fail("the final stage copies nothing from a build stage")
	case !strings.HasPrefix(build.image, "golang:"):
		fail("stage %q is FROM %q: want a golang image", build.name, build.image)
	default:
		ran := false
		for _, in := range build.body {
			if in.cmd == "run" && strings.Join(in.args, " ") == "make build" {
				ran = true
			}
		}
		if !ran {
			fail("stage %q does not RUN make build, the build CI runs for each release platform", build.name)
		} else if err := rehearse(t, build, ignored); err != nil {
			fail("stage %q: %v", build.name, err)
		}
	}

	errs = append(errs, checkEntrypoint(t, final)...)
	errs = append(errs, checkLabels(final)...)
	return errors.Join(errs...)
}

func nonRootID(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0
}

// checkEntrypoint checks the final stage's ENTRYPOINT: exec form, the
// copied binary, known flags, the default rules' directory, and explicit
// listen addresses that a container's outside can reach.
func checkEntrypoint(t *testing.T, final stage) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("Dockerfile: ENTRYPOINT"+format, a...)) }
	var ep *instruction
	bins := map[string]bool{}
	configDir := ""
	for i, in := range final.body {
		switch {
		case in.cmd == "entrypoint":
			ep = &final.body[i]
		case in.cmd == "copy" && in.flags["from"] != "":
			bins[path.Clean(in.args[len(in.args)-1])] = true
		case in.cmd == "copy" && len(in.args) == 2 && path.Clean(in.args[0]) == "config":
			configDir = path.Clean(in.args[1])
		}
	}
	if ep == nil {
		fail(": none in the final stage")
		return errs
	}
	if !ep.json {
		fail(" must be in exec (JSON) form, so the sidecar is PID 1 and gets SIGTERM")
		return errs
	}
	if !bins[path.Clean(ep.args[0])] {
		fail(": runs %s, which no COPY --from put there", ep.args[0])
	}
	args, err := parseArgs(sidecarFlags(t), ep.args[1:])
	if err != nil {
		fail(": %v", err)
		return errs
	}
	if configDir == "" {
		fail(": no COPY config/ of the default rules")
	} else if c := args["config"]; path.Clean(c) != configDir {
		fail(": --config=%s, but the default rules are copied to %s", c, configDir)
	}
	for _, name := range []string{"grpc-addr", "http-addr"} {
		addr, ok := args[name]
		if !ok {
			fail(": set --%s: the sidecar's default is loopback, unreachable from outside the container", name)
			continue
		}
		if _, _, loopback, err := splitAddr(addr); err != nil {
			fail(": --%s=%s: %v", name, addr, err)
		} else if loopback {
			fail(": --%s=%s is loopback, unreachable from outside the container", name, addr)
		}
	}
	return errs
}

// rehearse replays a build stage's COPYs from the build context that
// .dockerignore leaves, into a temporary directory, then asks Go whether
// every package and embedded file the sidecar needs is there, and make
// what `make build` would run. Nothing is compiled and nothing is
// downloaded (GOPROXY=off: go mod download has already run in the image).
func rehearse(t *testing.T, build *stage, ignored *patternmatcher.PatternMatcher) error {
	t.Helper()
	root := t.TempDir()
	workdir := "/"
	for _, in := range build.body {
		switch in.cmd {
		case "workdir":
			workdir = path.Join(workdir, in.args[0])
		case "copy":
			dest := in.args[len(in.args)-1]
			if !path.IsAbs(dest) {
				dest = path.Join(workdir, dest)
			}
			for _, src := range in.args[:len(in.args)-1] {
				to := filepath.Join(root, filepath.FromSlash(dest))
				if strings.HasSuffix(in.args[len(in.args)-1], "/") && !isDir(filepath.Join(repoRoot, src)) {
					to = filepath.Join(to, path.Base(src))
				}
				if err := copyContext(src, to, ignored); err != nil {
					return err
				}
			}
		}
	}
	dir := filepath.Join(root, filepath.FromSlash(workdir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := cleanEnv()

	list := exec.CommandContext(ctx, "go", "list", "-deps", "-e", "-f", "{{with .Error}}{{.}}\n{{end}}{{with .DepsErrors}}{{.}}\n{{end}}", "./cmd/ratelimit-sidecar")
	list.Dir, list.Env = dir, env
	out, err := list.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		return fmt.Errorf("the build context lacks what the sidecar needs: go list: %v\n%s", err, out)
	}

	// The stage's ARGs and ENV reach make as the environment, as they do
	// in the image's build.
	dry := exec.CommandContext(ctx, "make", "-n", "build")
	dry.Dir, dry.Env = dir, append(env, "VERSION=rehearsal", "REVISION=0123456789abcdef", "GOOS=linux", "GOARCH=arm64")
	out, err = dry.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make -n build: %v\n%s", err, out)
	}
	bin, err := buildOutput(string(out))
	if err != nil {
		return fmt.Errorf("make -n build, with the stage's environment: %w", err)
	}
	if want := "bin/ratelimit-sidecar"; bin != want {
		return fmt.Errorf("make -n build writes %s, want %s", bin, want)
	}
	return nil
}

// copyContext copies src (a file or directory of the repository) to dst,
// leaving out what .dockerignore excludes, as the build context would.
func copyContext(src, dst string, ignored *patternmatcher.PatternMatcher) error {
	return filepath.WalkDir(filepath.Join(repoRoot, src), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if m, err := ignored.MatchesOrParentMatches(filepath.ToSlash(rel)); err != nil || m {
			return err
		}
		under, err := filepath.Rel(filepath.Join(repoRoot, src), p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, under)
		if under == "." {
			to = dst
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return copyFile(p, to)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// TestDockerfileAnswersToBinRatelimit: the image holds the binary at
// /bin/ratelimit too, where envoyproxy/ratelimit's image has its own, so
// that Istio's sample and Envoy Gateway (command: ["/bin/ratelimit"]) run
// it unchanged.
func TestDockerfileAnswersToBinRatelimit(t *testing.T) {
	df, _ := readDockerfile(t)
	stages, err := parseStages(df)
	if err != nil {
		t.Fatal(err)
	}
	final := stages[len(stages)-1]
	for _, in := range final.body {
		if in.cmd == "copy" && in.flags["from"] != "" && path.Clean(in.args[len(in.args)-1]) == "/bin/ratelimit" {
			return
		}
	}
	t.Error("Dockerfile: the final stage does not COPY the binary to /bin/ratelimit")
}

// checkLabels checks the final stage's OCI labels: the licence, the
// source, and the version and commit from the build's arguments, which
// must be declared again in that stage (an ARG ends with its stage).
func checkLabels(final stage) []error {
	var errs []error
	labels := map[string]string{}
	args := map[string]bool{}
	for _, in := range final.body {
		switch in.cmd {
		case "arg":
			for _, a := range in.args {
				name, _, _ := strings.Cut(a, "=")
				args[name] = true
			}
		case "label":
			// BuildKit's parser gives key, value and "=" for each pair.
			for i := 0; i+1 < len(in.args); i += 3 {
				k, v := in.args[i], strings.Trim(in.args[i+1], `"`)
				labels[k] = v
				for _, ref := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(v, -1) {
					if !args[ref[1]] {
						errs = append(errs, fmt.Errorf("Dockerfile: final stage: LABEL uses $%s, but no ARG %s precedes it there", ref[1], ref[1]))
					}
				}
			}
		}
	}
	want := map[string]string{
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/ratelimit-sidecar/ratelimit-sidecar",
		"org.opencontainers.image.title":    "ratelimit-sidecar",
		"org.opencontainers.image.version":  "$VERSION",
		"org.opencontainers.image.revision": "$REVISION",
	}
	for _, k := range []string{"org.opencontainers.image.licenses", "org.opencontainers.image.source", "org.opencontainers.image.title", "org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		got, ok := labels[k]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("Dockerfile: final stage has no LABEL %s", k))
		case got != want[k]:
			errs = append(errs, fmt.Errorf("Dockerfile: LABEL %s=%q: want %q", k, got, want[k]))
		}
	}
	copied := map[string]bool{}
	for _, in := range final.body {
		if in.cmd == "copy" && in.flags["from"] == "" {
			for _, src := range in.args[:len(in.args)-1] {
				copied[path.Clean(src)] = true
			}
		}
	}
	for _, f := range []string{"LICENSE", "NOTICE"} {
		if !copied[f] {
			errs = append(errs, fmt.Errorf("Dockerfile: final stage does not COPY %s into the image", f))
		}
	}
	return errs
}
