package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	const rev = "9f2c0e7d5b1a4c3e8f6a2b0d7c9e1f3a5b7d9c0e"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
	}{
		{
			name: "no build information",
			want: Info{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH},
		},
		{
			name: "go install of a tag",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.0"}, Settings: settings("GOOS", "linux", "GOARCH", "arm64")},
			ok:   true,
			want: Info{Version: "v1.2.0", Go: "go1.26.0", Platform: "linux/arm64"},
		},
		{
			name: "go install of an untagged commit",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261204180000-9f2c0e7d5b1a"}, Settings: settings("GOOS", "linux", "GOARCH", "amd64")},
			ok:   true,
			want: Info{Version: "v0.0.0-20261204180000-9f2c0e7d5b1a", Revision: "9f2c0e7d5b1a", Go: "go1.26.0", Platform: "linux/amd64"},
		},
		{
			name: "pseudo-version after a tag",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.1-0.20261204180000-9f2c0e7d5b1a"}},
			ok:   true,
			want: Info{Version: "v1.2.1-0.20261204180000-9f2c0e7d5b1a", Revision: "9f2c0e7d5b1a", Go: "go1.26.0", Platform: runtime.GOOS + "/" + runtime.GOARCH},
		},
		{
			name: "go build in a modified checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261204180000-9f2c0e7d5b1a+dirty"},
				Settings: settings("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-12-04T18:00:00Z", "vcs.modified", "true", "GOOS", "linux", "GOARCH", "amd64")},
			ok:   true,
			want: Info{Version: "v0.0.0-20261204180000-9f2c0e7d5b1a+dirty", Revision: rev, Time: "2026-12-04T18:00:00Z", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"},
		},
		{
			name: "go run: no version recorded",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/fencedio/fenced"}},
			ok:   true,
			want: Info{Version: "(devel)", Go: "go1.26.0", Platform: runtime.GOOS + "/" + runtime.GOARCH},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := From(tc.bi, tc.ok); got != tc.want {
				t.Errorf("From = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want string
	}{
		{
			Info{Version: "v1.2.0", Go: "go1.26.0", Platform: "linux/amd64"},
			"fenced v1.2.0\nrevision unknown\ngo1.26.0 linux/amd64\n",
		},
		{
			Info{Version: "v0.0.0-20261204180000-9f2c0e7d5b1a+dirty", Revision: "9f2c0e7d5b1a", Time: "2026-12-04T18:00:00Z", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"},
			"fenced v0.0.0-20261204180000-9f2c0e7d5b1a+dirty\nrevision 9f2c0e7d5b1a (2026-12-04T18:00:00Z, with uncommitted changes)\ngo1.26.0 linux/amd64\n",
		},
		{
			Info{Version: "(devel)", Revision: "9f2c0e7d5b1a", Modified: true, Go: "go1.26.0", Platform: "linux/amd64"},
			"fenced (devel)\nrevision 9f2c0e7d5b1a (with uncommitted changes)\ngo1.26.0 linux/amd64\n",
		},
	} {
		if got := tc.info.Text("fenced"); got != tc.want {
			t.Errorf("Text =\n%s\nwant\n%s", got, tc.want)
		}
	}
}

// The test binary's own record: whatever it holds, Read reports the
// toolchain that runs the test.
func TestRead(t *testing.T) {
	info := Read()
	if info.Go != runtime.Version() || !strings.Contains(info.Platform, "/") || info.Version == "" {
		t.Errorf("Read = %+v", info)
	}
}
