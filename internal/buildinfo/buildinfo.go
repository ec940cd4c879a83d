// Package buildinfo says which build of fenced a binary is: the module
// version and the VCS revision it was built from, as the Go toolchain
// recorded them (runtime/debug.ReadBuildInfo).
//
// What is known depends on how the binary was built. `go install
// module@version` records the version but no VCS settings; for a
// pseudo-version (an untagged commit, v0.0.0-20261204180000-ef95ea0d1234)
// the revision's 12-digit prefix is read from the version itself. `go build`
// in a git clone records the full revision, its time and whether the work
// tree had uncommitted changes. `go run`, test binaries, builds with
// -buildvcs=false and builds in a linked git worktree (whose .git is a file,
// which the go command does not recognise) record no revision: Version is
// then "(devel)" or a pseudo-version without one, and Revision is empty,
// which Text prints as "unknown". Nothing here is checked against the
// repository: the toolchain's record is reported as it is.
package buildinfo

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what a binary knows of its own build.
type Info struct {
	// Version is the main module's version: a tag (v1.2.0), a
	// pseudo-version, or "(devel)" when the toolchain recorded none.
	Version string `json:"version"`
	// Revision is the VCS revision (a full commit hash, or a 12-digit
	// prefix taken from a pseudo-version); empty when unknown.
	Revision string `json:"revision,omitempty"`
	// Time is the revision's commit time (RFC 3339), empty when unknown.
	Time string `json:"time,omitempty"`
	// Modified reports that the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary (go1.26.0).
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// pseudo matches the tail of a pseudo-version: a 14-digit UTC timestamp and
// a 12-digit revision prefix, before any +incompatible or +dirty suffix.
var pseudo = regexp.MustCompile(`[-.](\d{14})-([0-9a-f]{12})(\+.*)?$`)

// From returns the Info recorded in bi; ok is ReadBuildInfo's second
// result (false when the binary carries no build information).
func From(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return info
	}
	if bi.GoVersion != "" {
		info.Go = bi.GoVersion
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		info.Platform = goos + "/" + goarch
	}
	if info.Revision == "" {
		if m := pseudo.FindStringSubmatch(info.Version); m != nil {
			info.Revision = m[2]
			info.Modified = strings.HasSuffix(info.Version, "+dirty")
		}
	}
	return info
}

// Text formats info for people, one field a line, the program's name
// first:
//
//	fenced v1.2.0
//	revision 9f2c0e7d5b1a4c3e8f6a2b0d7c9e1f3a5b7d9c0e (2026-12-04T18:00:00Z)
//	go1.26.0 linux/amd64
func (info Info) Text(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", program, info.Version)
	rev := info.Revision
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(&b, "revision %s", rev)
	switch {
	case info.Time != "" && info.Modified:
		fmt.Fprintf(&b, " (%s, with uncommitted changes)", info.Time)
	case info.Time != "":
		fmt.Fprintf(&b, " (%s)", info.Time)
	case info.Modified:
		b.WriteString(" (with uncommitted changes)")
	}
	fmt.Fprintf(&b, "\n%s %s\n", info.Go, info.Platform)
	return b.String()
}
