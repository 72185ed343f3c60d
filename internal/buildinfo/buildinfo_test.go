package buildinfo_test

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/buildinfo"
)

// TestResolve: the stamped version wins; without one, the version
// the Go toolchain recorded (go install …@v0.1.0); without that, "dev".
// The revision likewise, from the stamp or the toolchain's VCS record.
func TestResolve(t *testing.T) {
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
		want          buildinfo.Build
	}{
		{name: "nothing", want: buildinfo.Build{Version: "dev"}},
		{name: "stamped", stamped: "v0.1.0", srev: rev, bi: vcs("(devel)"), want: buildinfo.Build{Version: "v0.1.0", Revision: rev}},
		{name: "stamped_over_module", stamped: "v0.1.0-3-gabcdef1", bi: vcs("v0.1.0"), want: buildinfo.Build{Version: "v0.1.0-3-gabcdef1"}},
		{name: "go_install", bi: vcs("v0.1.0"), want: buildinfo.Build{Version: "v0.1.0"}},
		{name: "dev_stamp_falls_back", stamped: "dev", bi: vcs("v0.1.0"), want: buildinfo.Build{Version: "v0.1.0"}},
		{name: "devel", bi: vcs("(devel)"), want: buildinfo.Build{Version: "dev"}},
		{name: "checkout", bi: vcs("v0.1.1-0.20261124152709-beb34fc1a2b3+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			want: buildinfo.Build{Version: "v0.1.1-0.20261124152709-beb34fc1a2b3+dirty", Revision: rev, Modified: true}},
		{name: "stamped_revision_wins", srev: "fedcba", bi: vcs("(devel)", "vcs.revision", rev, "vcs.modified", "true"), want: buildinfo.Build{Version: "dev", Revision: "fedcba"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildinfo.Resolve(tt.stamped, tt.srev, tt.bi); got != tt.want {
				t.Errorf("Resolve(%q, %q) = %+v, want %+v", tt.stamped, tt.srev, got, tt.want)
			}
		})
	}
}

// TestVersionLines: the commit line appears when the commit is known.
func TestVersionLines(t *testing.T) {
	var b strings.Builder
	buildinfo.Build{Version: "v0.1.0", Revision: "abc", Modified: true}.Write(&b)
	want := "ratelimit-sidecar v0.1.0\ncommit   abc (modified)\ngo       " + runtime.Version() + "\nplatform " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
