package client

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ErrAcquireUncertain is matched by the error of an Acquire whose outcome
// is unknown: the caller may hold the key, through a grant it never saw,
// until that grant's TTL runs out. See *UncertainError.
var ErrAcquireUncertain = errors.New("acquisition outcome unknown")

// UncertainError is returned by Acquire when an attempt that may have been
// granted went unanswered (the node died, or lost its leadership, after
// writing the grant) and the retry on another node found the key held by
// the same owner: most likely by that unseen grant, whose lease ID the
// caller never learned, so it can neither renew nor release it. The key
// stays taken until that lease expires, at most Remaining after the answer.
//
// It matches ErrAcquireUncertain, never ErrHeld: the holder may be the
// caller itself. Callers that must not act twice treat it as "perhaps
// acquired": they do not write with any token, and acquire again after
// Remaining, or with WithWait(Remaining) and more.
type UncertainError struct {
	Key   string
	Owner string // the owner the retry found, the caller's own
	// Remaining is the time the holder's lease had left when the retry was
	// answered, as the server saw it.
	Remaining time.Duration
	// Attempt is the error of the unanswered attempt.
	Attempt error
}

func (e *UncertainError) Error() string {
	return fmt.Sprintf("%v: an attempt went unanswered (%v) and the retry found %q held by this owner %q, "+
		"perhaps by that attempt's grant (%v remaining)", ErrAcquireUncertain, e.Attempt, e.Key, e.Owner, e.Remaining)
}

// Is makes UncertainError match ErrAcquireUncertain.
func (e *UncertainError) Is(target error) bool { return target == ErrAcquireUncertain }

// uncertain returns an *UncertainError if the final answer err of an
// Acquire by owner says the key is held by owner after an earlier attempt
// whose error was unanswered: the earlier attempt may be that holder.
// Otherwise it returns err.
func uncertain(err error, owner string, unanswered error) error {
	var held *HeldError
	if unanswered == nil || !errors.As(err, &held) || held.Owner != owner {
		return err
	}
	return &UncertainError{Key: held.Key, Owner: held.Owner, Remaining: held.Remaining, Attempt: unanswered}
}

// releaseGone reports whether the final answer err of a Release means the
// lease is gone rather than "not held": not_found after an earlier attempt
// whose error was unanswered. That attempt may have released the lease
// before its answer was lost, so the retry cannot tell "released by us"
// from "expired": either way the lease is gone, which is what the caller
// asked for. Without an unanswered attempt, not_found is ErrNotHeld.
func releaseGone(err, unanswered error) bool {
	return unanswered != nil && errors.Is(err, ErrNotHeld)
}

// mayHaveArrived reports whether a failed attempt may have reached a
// server of the pinned cluster that acted on it. Only a refused connection
// proves it did not, or an answer of another cluster, whose grant is of no
// concern to the pinned cluster's keys (pin.go).
func mayHaveArrived(err error) bool {
	return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, ErrClusterMismatch)
}
