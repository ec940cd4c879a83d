package fence

import (
	"context"
	"errors"
	"fmt"
)

// ErrStaleToken is matched (with errors.Is) by every rejection of a token
// lower than the highest accepted for its scope. A client that sees it must
// treat its authority as lost: it must not retry with the same token.
var ErrStaleToken = errors.New("stale fencing token")

// ErrNoToken is returned when the presented token is 0. Tokens issued by
// fenced start above 0, so 0 always means that no token was supplied.
var ErrNoToken = errors.New("missing fencing token")

// ErrTokenOutOfRange is matched by the rejection of a token that is valid
// but larger than a guard's storage can hold (the SQL guards keep tokens in
// a signed 64-bit column). It is the client's error, not an outage: nothing
// is applied, and presenting the same token again fails the same way.
var ErrTokenOutOfRange = errors.New("fencing token out of the guard's range")

// ErrInvalidScope is matched (with errors.Is) by every rejection of a scope
// that breaks the rule of ValidateScope. Nothing is applied or recorded.
var ErrInvalidScope = errors.New("invalid fencing scope")

// StaleTokenError describes a rejected mutation. It matches ErrStaleToken.
type StaleTokenError struct {
	Scope     string // the scope the mutation was for
	Presented uint64 // the token that came with the mutation
	Highest   uint64 // the highest token accepted for Scope so far
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("stale fencing token for scope %q: presented %d, highest accepted %d",
		e.Scope, e.Presented, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard applies mutations only for tokens that are not stale (invariant I5).
//
// Implementations are safe for concurrent use. Do calls for one scope are
// serialized; Do calls for different scopes may run in parallel.
type Guard interface {
	// Do runs apply if token >= the highest token accepted for scope, and on
	// success records token as the highest. While apply runs, no other
	// mutation of scope is checked or applied. If apply returns an error,
	// nothing is recorded and the error is returned as is. A stale token
	// returns a *StaleTokenError without calling apply.
	Do(ctx context.Context, scope string, token uint64, apply func(ctx context.Context) error) error

	// Highest returns the highest token accepted for scope, 0 if none.
	Highest(ctx context.Context, scope string) (uint64, error)
}

// Decision is what a guard reports to its Observer for each checked token.
type Decision struct {
	Scope     string
	Presented uint64
	// Highest is the highest token accepted for Scope before this check.
	Highest  uint64
	Accepted bool
	// Sequence is the write's sequence (WithSequence), 0 when none came.
	Sequence uint64
	// Duplicate is set for a write refused as a duplicate of one already
	// applied (ErrDuplicate): not accepted, and not stale either.
	Duplicate bool
	// Owner is the lease owner the mutation came with (WithOwner, a lease
	// that is Owned, the Fencing-Owner header), "" when none came. It is
	// informational: guards never check it.
	Owner string
}

// Observer is told of every accepted and rejected mutation. Guards call it
// after the decision is final (after commit for accepted mutations), outside
// any lock; it must be safe for concurrent use and should not block.
type Observer interface {
	Observe(ctx context.Context, d Decision)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, d Decision)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, d Decision) { f(ctx, d) }

// Observers fans one decision out to several observers, in order.
type Observers []Observer

// Observe calls each observer in turn.
func (os Observers) Observe(ctx context.Context, d Decision) {
	for _, o := range os {
		o.Observe(ctx, d)
	}
}

// Check validates scope (see ValidateScope) and token and reports whether
// token may be applied given highest, the highest accepted so far. It
// returns nil, ErrNoToken, a *ScopeError (matching ErrInvalidScope) or a
// *StaleTokenError. Guards for other stores use it so that every guard
// decides the same way.
func Check(scope string, token, highest uint64) error {
	if err := ValidateScope(scope); err != nil {
		return err
	}
	if token == 0 {
		return ErrNoToken
	}
	if token < highest {
		return &StaleTokenError{Scope: scope, Presented: token, Highest: highest}
	}
	return nil
}
