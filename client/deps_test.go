package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestLightDependencies checks that the client, its elections and the
// guards link none of the server's machinery (raft, its log store, bbolt,
// hclog, go-metrics) nor the Prometheus client: a program that takes a
// lease or guards a resource stays small. Two packages exist to carry one of them each:
// fence/fenceprom (Prometheus) and fence/fencebolt (bbolt). The broker
// clients are linked only by the packages made for them: nats.go by
// fence/fencenats and fence/fencemsg/fencejetstream, amqp091-go by
// fence/fencemsg/fenceamqp; fence/fencemsg itself links neither. The AWS SDK
// (and its smithy-go) is linked by fence/fences3 alone.
func TestLightDependencies(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	banned := map[string]string{
		"github.com/hashicorp/raft":         "",
		"github.com/hashicorp/raft-wal":     "",
		"github.com/hashicorp/raft-boltdb":  "",
		"github.com/hashicorp/go-hclog":     "",
		"github.com/hashicorp/go-metrics":   "",
		"github.com/armon/go-metrics":       "",
		"go.etcd.io/bbolt":                  "github.com/fencedio/fenced/fence/fencebolt",
		"github.com/boltdb/bolt":            "",
		"github.com/prometheus/":            "github.com/fencedio/fenced/fence/fenceprom",
		"github.com/fencedio/fenced/server": "",
		"github.com/nats-io/":               "github.com/fencedio/fenced/fence/fencenats github.com/fencedio/fenced/fence/fencemsg/fencejetstream",
		"github.com/rabbitmq/":              "github.com/fencedio/fenced/fence/fencemsg/fenceamqp",
		"github.com/aws/":                   "github.com/fencedio/fenced/fence/fences3",
	}
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goCmd, "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./client", "./client/election", "./client/testdata/hello", "./fence/...")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, deps := f[0], f[1:]
		seen[pkg] = true
		for _, d := range deps {
			for prefix, allowedIn := range banned {
				if (d == strings.TrimSuffix(prefix, "/") || strings.HasPrefix(d, strings.TrimSuffix(prefix, "/")+"/")) && !slices.Contains(strings.Fields(allowedIn), pkg) {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
	}
	for _, want := range []string{"github.com/fencedio/fenced/client", "github.com/fencedio/fenced/client/election", "github.com/fencedio/fenced/client/testdata/hello",
		"github.com/fencedio/fenced/fence", "github.com/fencedio/fenced/fence/fencesql", "github.com/fencedio/fenced/fence/fencereport",
		"github.com/fencedio/fenced/fence/fencemsg", "github.com/fencedio/fenced/fence/fences3"} {
		if !seen[want] {
			t.Errorf("go list did not list %s; the test is not looking at what it should:\n%s", want, out)
		}
	}
}
