package torture

import (
	"strings"
	"testing"
)

// TestUnknownKeysAreNotClean: a run whose linearizability check timed out
// on a key has not passed, even with no violation.
func TestUnknownKeysAreNotClean(t *testing.T) {
	r := &Report{Summary: Summary{Acquisitions: Counts{OK: 1}}}
	if !r.Passed() {
		t.Fatal("a run with grants and no violation failed")
	}
	r.UnknownKeys = 1
	if r.Passed() {
		t.Error("a run with a key of unknown result passed")
	}
	if v := r.verdict(); !strings.HasPrefix(v, "INCONCLUSIVE") {
		t.Errorf("verdict %q, want INCONCLUSIVE", v)
	}
}
