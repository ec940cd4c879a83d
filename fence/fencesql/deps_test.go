package fencesql_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLightDependencies checks that a program using only fence and fencesql
// with PostgreSQL links neither the MySQL driver nor the Prometheus client:
// depending on the guards must stay light.
func TestLightDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goCmd, "list", "-deps", "./testdata/pgonly").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var linked bool
	for _, d := range deps {
		if d == "github.com/fencedio/fenced/fence/fencesql" {
			linked = true
		}
		for _, banned := range []string{"github.com/go-sql-driver/mysql", "github.com/prometheus/", "modernc.org/sqlite"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("a fence+fencesql program with PostgreSQL links %s", d)
			}
		}
	}
	if !linked {
		t.Fatalf("go list -deps did not list fencesql; the test program is not what it should be:\n%s", out)
	}
}
