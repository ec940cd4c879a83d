package api

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// TestAfterCut: a retried acquisition that finds the key held by its own
// owner, or no leader, leaves the outcome open (unavailable), since the
// try cut by the leader change may have been granted; a first try's answer
// and a holder with another owner stand.
func TestAfterCut(t *testing.T) {
	held := func(owner string) error {
		return apierr.Connect(&lease.HeldError{Key: "k", Owner: owner, Token: 7})
	}
	for _, tc := range []struct {
		name      string
		err       error
		attempt   int
		wantCode  connect.Code // 0: err unchanged
		wantMaybe bool
	}{
		{"first try held by self", held("me"), 0, 0, false},
		{"retry held by self", held("me"), 1, connect.CodeUnavailable, true},
		{"retry held by another", held("you"), 2, 0, false},
		{"retry without a leader", apierr.Connect(apierr.ErrNotReady), 1, connect.CodeUnavailable, true},
		{"retry refused as bad input", apierr.Connect(apierr.Invalidf("no")), 1, 0, false},
	} {
		got := retriedAcquireError(tc.err, tc.attempt, "me")
		if tc.wantCode == 0 {
			if got != tc.err {
				t.Errorf("%s: %v, want the answer unchanged", tc.name, got)
			}
			continue
		}
		if connect.CodeOf(got) != tc.wantCode || errors.Is(got, errMaybeGranted) != tc.wantMaybe {
			t.Errorf("%s: %v, want %v (maybe granted: %v)", tc.name, got, tc.wantCode, tc.wantMaybe)
		}
	}
	if retriedAcquireError(nil, 1, "me") != nil {
		t.Error("a grant on retry must stand")
	}
}
