package lease_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// TestPropertiesCatchMutants measures TestStateProperties: it builds this
// package's tests with the fenced_failpoints tag and runs the property
// test with each mutant of the state machine switched on, one at a time.
// Each run must fail with the mutant's symptom.
func TestPropertiesCatchMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package's tests with the failpoints; skipped with -short")
	}
	if failpoint.Compiled {
		t.Skip("this binary carries the failpoints; the mutant runs are its children")
	}
	bin := filepath.Join(t.TempDir(), "lease-mutants.test")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.CommandContext(ctx, goCmd, "test", "-c", "-tags", "fenced_failpoints", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags fenced_failpoints: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		mutant  failpoint.Name
		symptom string // in the property test's failure
	}{
		{failpoint.GrantHeld, "acquire of held"},
		{failpoint.HandoverOldToken, "not above previous"},
		{failpoint.RestoreDropsLeases, "state has"},
	} {
		t.Run(string(tc.mutant), func(t *testing.T) {
			cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestStateProperties$", "-test.count", "1", "-rapid.nofailfile")
			cmd.Env = append(os.Environ(), failpoint.EnvVar+"="+string(tc.mutant))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("TestStateProperties passed with mutant %s switched on", tc.mutant)
			}
			if !strings.Contains(string(out), tc.symptom) {
				t.Fatalf("TestStateProperties failed with mutant %s, but not with %q:\n%s", tc.mutant, tc.symptom, tail(out, 2000))
			}
		})
	}
}

func tail(b []byte, n int) string {
	return string(b[max(len(b)-n, 0):])
}
