package server

import (
	"context"
	"testing"
	"time"
)

// A run of becomeLeader must not reset the deadlines from a view of the
// state older than the reset: a lease granted in between would drop out of
// expiry tracking and never expire. Nor may a run whose leadership already
// ended (its context cancelled) reset anything: by then a newer run may
// track leases its stale view lacks. The hook grants a lease just before
// the reset, the window the two cases share.
func TestBecomeLeaderKeepsLeasesGrantedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
	}{{"current", false}, {"stale", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, Config{})
			ctx := context.Background()
			if _, err := s.Acquire(ctx, "early", "a", time.Minute, 0); err != nil {
				t.Fatal(err)
			}
			var (
				hookErr error
				hooked  bool
			)
			acquireLate := func() {
				hooked = true
				_, hookErr = s.Acquire(ctx, "late", "b", time.Minute, 0)
			}
			s.beforeLeaderReset = acquireLate
			runCtx, cancel := context.WithCancel(ctx)
			if tc.cancel {
				cancel()
			}
			s.becomeLeader(runCtx)
			cancel()
			if !hooked { // the stale run returned before the window
				acquireLate()
			}
			if hookErr != nil {
				t.Fatal(hookErr)
			}
			for _, key := range []string{"early", "late"} {
				if s.expirer.remaining(key, time.Now()) == 0 {
					t.Errorf("lease on %q is not tracked for expiry after becomeLeader", key)
				}
			}
			if !s.Ready() {
				t.Error("the node stopped serving")
			}
		})
	}
}
