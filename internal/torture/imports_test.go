package torture

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const tortureRoot = "github.com/fencedio/fenced/internal/torture"

// layers lists, for each package of the harness, the other packages of the
// harness it may depend on, directly or not. The history and its checkers
// are at the bottom and never reach process control or the network faults;
// the engine (this package) is on top and nothing of the harness depends
// on it. A package missing here fails the test, so that a new one states
// its place.
var layers = map[string][]string{
	"history":  {},
	"check":    {"history"},
	"queue":    {"history"},
	"worker":   {"history", "queue"},
	"netfault": {"history"},
	"proc":     {"history", "worker", "queue"},
	"":         {"history", "check", "worker", "queue", "netfault", "proc"},
}

// TestImportsRunOneWay pins the harness's import graph with `go list
// -deps`, so that a checker cannot silently come to depend on the processes
// it judges.
func TestImportsRunOneWay(t *testing.T) {
	out := goList(t, "-f", "{{.ImportPath}}", tortureRoot+"/...")
	for _, pkg := range strings.Fields(out) {
		name := strings.TrimPrefix(strings.TrimPrefix(pkg, tortureRoot), "/")
		allowed, ok := layers[name]
		if !ok {
			t.Errorf("%s is not in layers: give it its place in the import graph", pkg)
			continue
		}
		for _, dep := range strings.Fields(goList(t, "-deps", "-f", "{{.ImportPath}}", pkg)) {
			d, ok := strings.CutPrefix(dep, tortureRoot)
			if !ok || dep == pkg {
				continue
			}
			if d = strings.TrimPrefix(d, "/"); !slices.Contains(allowed, d) {
				t.Errorf("%s depends on %s; it may depend only on %q", pkg, dep, allowed)
			}
		}
	}
}

// TestOnlyTheCommandImportsTheEngine: the engine is wired into fencectl and
// nothing else.
func TestOnlyTheCommandImportsTheEngine(t *testing.T) {
	out := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "github.com/fencedio/fenced/...")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == tortureRoot || f[0] == "github.com/fencedio/fenced/cmd/fencectl" {
			continue
		}
		if slices.Contains(f[1:], tortureRoot) {
			t.Errorf("%s imports %s; only cmd/fencectl may", f[0], tortureRoot)
		}
	}
}

func goList(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	return string(out)
}
