package lease

import (
	"errors"
	"fmt"
	"time"
)

// Lease is one ownership epoch of a key.
type Lease struct {
	Key   string
	ID    string // random, hex, at least 128 bits; needed to renew or release
	Owner string
	Token uint64 // fencing token: the log index of the grant
	TTL   time.Duration
}

// ErrNotHeld is returned when a lease ID is not the current lease of its key:
// the lease expired, was released, or never existed.
var ErrNotHeld = errors.New("lease not held")

// ErrWrongTerm is the result of an expiry batch written to the log in
// another leadership term than the one whose leader decided it.
var ErrWrongTerm = errors.New("expiry decided in another leadership term")

// ErrHeld is matched by *HeldError.
var ErrHeld = errors.New("lease held by another owner")

// HeldError reports that a key is leased to someone else.
type HeldError struct {
	Key   string
	Owner string
	Token uint64
	// Remaining is how long the holder's lease has left as the leader saw it
	// when it answered; 0 when unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("key %q is held by %q (token %d, %v remaining)", e.Key, e.Owner, e.Token, e.Remaining)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
