package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionCommand: version, -version and --version print the version
// on the first line, as --version always did, then the commit when it is
// known, the Go version and the platform. `version` failed with
// "unexpected argument".
func TestVersionCommand(t *testing.T) {
	for _, give := range [][]string{
		{"version"},
		{"--version"},
		{"-version"},
		{"--config=/etc/ratelimit-sidecar/", "version"},
	} {
		t.Run(strings.Join(give, " "), func(t *testing.T) {
			stdout, _, err := runCLI(t, []string{"RLS_MAX_HITS_ADDEND=lots"}, give...)
			if err != nil {
				t.Fatalf("err = %v, want nil (the environment's settings do not matter to version)", err)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "ratelimit-sidecar ") || len(lines[0]) <= len("ratelimit-sidecar ") {
				t.Errorf("first line %q, want ratelimit-sidecar and the version", lines[0])
			}
			for _, want := range []string{"go       " + runtime.Version(), "platform " + runtime.GOOS + "/" + runtime.GOARCH} {
				if !strings.Contains(stdout, "\n"+want+"\n") {
					t.Errorf("stdout lacks the line %q:\n%s", want, stdout)
				}
			}
		})
	}
}

// TestResolveBuild: the stamped version wins; without one, the version
// the Go toolchain recorded (go install …@v0.1.0); without that, "dev".
// The revision likewise, from the stamp or the toolchain's VCS record.
func TestResolveBuild(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(main string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ratelimit-sidecar/ratelimit-sidecar", Version: main}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	tests := []struct {
		name          string
		stamped, srev string
		bi            *debug.BuildInfo
		want          buildVersion
	}{
		{name: "nothing", want: buildVersion{version: "dev"}},
		{name: "stamped", stamped: "v0.1.0", srev: rev, bi: vcs("(devel)"), want: buildVersion{version: "v0.1.0", revision: rev}},
		{name: "stamped_over_module", stamped: "v0.1.0-3-gabcdef1", bi: vcs("v0.1.0"), want: buildVersion{version: "v0.1.0-3-gabcdef1"}},
		{name: "go_install", bi: vcs("v0.1.0"), want: buildVersion{version: "v0.1.0"}},
		{name: "dev_stamp_falls_back", stamped: "dev", bi: vcs("v0.1.0"), want: buildVersion{version: "v0.1.0"}},
		{name: "devel", bi: vcs("(devel)"), want: buildVersion{version: "dev"}},
		{name: "checkout", bi: vcs("v0.1.1-0.20261124152709-beb34fc1a2b3+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			want: buildVersion{version: "v0.1.1-0.20261124152709-beb34fc1a2b3+dirty", revision: rev, modified: true}},
		{name: "stamped_revision_wins", srev: "fedcba", bi: vcs("(devel)", "vcs.revision", rev, "vcs.modified", "true"), want: buildVersion{version: "dev", revision: "fedcba"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolveBuild(tt.stamped, tt.srev, tt.bi); got != tt.want {
				t.Errorf("resolveBuild(%q, %q) = %+v, want %+v", tt.stamped, tt.srev, got, tt.want)
			}
		})
	}
}

// TestVersionLines: the commit line appears when the commit is known.
func TestVersionLines(t *testing.T) {
	var b strings.Builder
	buildVersion{version: "v0.1.0", revision: "abc", modified: true}.write(&b)
	want := "ratelimit-sidecar v0.1.0\ncommit   abc (modified)\ngo       " + runtime.Version() + "\nplatform " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
