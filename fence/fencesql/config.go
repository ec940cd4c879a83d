package fencesql

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencedio/fenced/fence"
)

// Config configures a Guard.
type Config struct {
	// Dialect is the SQL dialect of the database. Required.
	Dialect Dialect

	// Table is the scope table, optionally qualified as "schema.table".
	// Default DefaultTable ("fence_scopes"). It must be a plain identifier
	// (see ErrInvalidIdentifier).
	Table string

	// Observer, if set, is told of every decision: a rejection as soon as
	// Check finds it (Do: after its transaction is rolled back), an
	// acceptance only by Do and ExternalGuard.Do, after the commit. Check
	// alone cannot report acceptances because the caller commits. Default:
	// none.
	Observer fence.Observer
	// Verifier, if set, refuses every Do and Check whose token's signature
	// (fence.SignatureFrom its context) it does not accept, before the
	// database is asked anything (see fence.NewSignedGuard). Default: none.
	Verifier *fence.Verifier

	// StrictSequences refuses a write whose sequence (fence.WithSequence)
	// under the current token is not the last one plus 1, with a
	// *fence.SequenceGapError. Default: any sequence above the last passes.
	StrictSequences bool

	// TxOptions are the options Do uses to begin its transactions. Default
	// nil, the driver's default: READ COMMITTED on PostgreSQL, REPEATABLE
	// READ on MySQL/MariaDB, a deferred transaction on SQLite. All three
	// are correct; see the package documentation for stricter levels.
	TxOptions *sql.TxOptions

	// Retries is how many more times Do runs the whole transaction (begin,
	// check, callback, commit) when an attempt fails with an error for which
	// Retryable is true: a deadlock, serialization failure or busy SQLite
	// database. The database has then rolled the attempt back, so nothing
	// of it is committed, but the callback runs again; leave Retries at 0
	// unless the callback's only effects are through its transaction.
	// ExternalGuard.Do retries only attempts that failed before apply ran.
	// Default 0. Stale tokens are never retried.
	Retries int

	// RetryBackoff is the wait before the first retry. Each further retry
	// waits twice as long as the one before, up to MaxRetryBackoff, and
	// every wait is drawn at random between half and all of that, so that
	// transactions that collided once do not collide again in lockstep. A
	// wait ends early when the context does; Do then returns the context's
	// error with the last attempt's. Default DefaultRetryBackoff (10ms).
	RetryBackoff time.Duration

	// MaxRetryBackoff bounds each wait between retries. Default
	// DefaultMaxRetryBackoff (1s); it must not be below RetryBackoff.
	MaxRetryBackoff time.Duration
}

// Defaults of Config.RetryBackoff and Config.MaxRetryBackoff. With them,
// five retries wait at most 10+20+40+80+160 ms = 310 ms in all, and at least
// half of that.
const (
	DefaultRetryBackoff    = 10 * time.Millisecond
	DefaultMaxRetryBackoff = time.Second
)

// Validate checks the configuration; New calls it.
func (c Config) Validate() error {
	if err := c.Dialect.valid(); err != nil {
		return err
	}
	table := c.Table
	if table == "" {
		table = DefaultTable
	}
	if _, err := c.Dialect.quoteTable(table); err != nil {
		return err
	}
	if c.Retries < 0 {
		return fmt.Errorf("fencesql: Retries is %d, must not be negative", c.Retries)
	}
	if c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 {
		return fmt.Errorf("fencesql: negative retry backoff (%v, max %v)", c.RetryBackoff, c.MaxRetryBackoff)
	}
	base, ceiling := c.backoffs()
	if ceiling < base {
		return fmt.Errorf("fencesql: MaxRetryBackoff %v is below RetryBackoff %v", ceiling, base)
	}
	return nil
}

// backoffs returns RetryBackoff and MaxRetryBackoff with defaults applied.
func (c Config) backoffs() (base, ceiling time.Duration) {
	base, ceiling = c.RetryBackoff, c.MaxRetryBackoff
	if base == 0 {
		base = DefaultRetryBackoff
	}
	if ceiling == 0 {
		ceiling = DefaultMaxRetryBackoff
	}
	return base, ceiling
}

// backoff waits before retry number retry (1 for the first), or until ctx
// ends, and returns ctx's error in that case.
func (c Config) backoff(ctx context.Context, retry int) error {
	base, ceiling := c.backoffs()
	d := base
	for i := 1; i < retry && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry decides whether Do runs another attempt after err, waiting the
// backoff first. It returns the error to give up with, or nil to go on.
func (g *Guard) retry(ctx context.Context, attempt int, err error) error {
	if !Retryable(err) || attempt >= g.cfg.Retries {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return err // attempt has already said that the context ended
	}
	if cerr := g.cfg.backoff(ctx, attempt+1); cerr != nil {
		return fmt.Errorf("fencesql: %w while waiting to retry; the last attempt was rolled back: %w", cerr, err)
	}
	return nil
}
