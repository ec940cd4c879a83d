package main

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/buildinfo"
)

// fenced version prints what the binary knows of its build, nothing else,
// and starts no server.
func TestVersion(t *testing.T) {
	cmd := rootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := buildinfo.Read().Text("fenced"); out.String() != want {
		t.Errorf("fenced version printed\n%s\nwant\n%s", out.String(), want)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "fenced ") || !strings.HasPrefix(lines[1], "revision ") ||
		!strings.HasPrefix(lines[2], runtime.Version()+" ") {
		t.Errorf("fenced version printed\n%s", out.String())
	}

	cmd = rootCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"version", "extra"})
	var ue *usageError
	if err := cmd.Execute(); !errors.As(err, &ue) {
		t.Errorf("fenced version extra: %v, want a usage error", err)
	}
}
