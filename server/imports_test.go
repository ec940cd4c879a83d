package server

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fencedio/fenced/"

// layers lists the packages of server/, bottom up. A package imports only
// packages of layers below its own, so that a reader of one needs to know
// nothing of those above it, and imports cannot silently grow back into a
// tangle. A new package under server/ is placed here.
var layers = [][]string{
	{"server/internal/raftlog", "server/internal/leadercheck", "server/internal/contact", "server/internal/security",
		"server/internal/sharegate", "server/internal/logs", "server/internal/fanout",
		"server/internal/fsm", "server/internal/streamwrite",
		"server/internal/expiry", "server/internal/waiters"},
	{"server/internal/peers", "server/internal/dashboard", "server/internal/admission",
		"server/internal/rejections"},
	{"server/internal/apierr", "server/internal/restore"},
	{"server/internal/api", "server/internal/membership", "server/internal/nodemetrics"},
	{"server/internal/forward"},
	{"server"},
}

// nodeImporters are the packages outside cmd/ that may import the node,
// with their sub-packages: harnesses that run it for tests.
var nodeImporters = []string{
	"internal/fencedtest",
	"internal/torture",
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

// listModule lists the module's packages and their imports, test files
// left out: a test may import whatever it checks.
func listModule(t *testing.T) []listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// importViolations returns, for each package, the imports that the layers
// and nodeImporters do not allow.
func importViolations(pkgs []listedPackage) []string {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	var bad []string
	for _, p := range pkgs {
		from := strings.TrimPrefix(p.ImportPath, module)
		fromLayer, inServer := layer[from]
		if strings.HasPrefix(from, "server/") && !inServer {
			bad = append(bad, from+" is not in the layers of imports_test.go")
			continue
		}
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			toLayer, toServer := layer[to]
			switch {
			case to == "server" && !inServer:
				if !strings.HasPrefix(from, "cmd/") && !slices.ContainsFunc(nodeImporters, func(p string) bool {
					return from == p || strings.HasPrefix(from, p+"/")
				}) {
					bad = append(bad, from+" imports the node (server)")
				}
			case inServer && toServer && toLayer >= fromLayer:
				bad = append(bad, from+" imports "+to+", which is not below it")
			}
		}
	}
	return bad
}

// TestImportsRunOneWay pins the import graph of server/.
func TestImportsRunOneWay(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list packages with")
	}
	pkgs := listModule(t)
	if !slices.ContainsFunc(pkgs, func(p listedPackage) bool { return p.ImportPath == module+"server" }) {
		t.Fatalf("go list found no %sserver among %d packages", module, len(pkgs))
	}
	for _, v := range importViolations(pkgs) {
		t.Error(v)
	}
}

// TestImportViolationsFound shows that the check sees the imports it
// forbids.
func TestImportViolationsFound(t *testing.T) {
	pkgs := []listedPackage{
		{ImportPath: module + layers[0][0], Imports: []string{module + "server"}},
		{ImportPath: module + "client", Imports: []string{module + "server"}},
		{ImportPath: module + "internal/torturer", Imports: []string{module + "server"}},
		{ImportPath: module + "server/internal/unlisted"},
		{ImportPath: module + "cmd/fenced", Imports: []string{module + "server"}},
		{ImportPath: module + "internal/torture", Imports: []string{module + "server"}},
		{ImportPath: module + "internal/torture/proc", Imports: []string{module + "server"}},
		{ImportPath: module + "server", Imports: []string{module + layers[0][0], "fmt"}},
	}
	got := importViolations(pkgs)
	want := []string{
		layers[0][0] + " imports server, which is not below it",
		"client imports the node (server)",
		"internal/torturer imports the node (server)",
		"server/internal/unlisted is not in the layers of imports_test.go",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n%q\nwant\n%q", got, want)
	}
}
