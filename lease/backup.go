package lease

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Backups and restores
//
// A backup is a Snapshot without current leases (Snapshot.Backup): each
// key that had one keeps its token as a freed key does. It holds no lease
// IDs, which are the holders' secrets, and a restored cluster has no lease
// that predates it: holders acquire again and get new tokens.
//
// A new cluster restored from a backup taken at log index A starts its log
// at A+bump+1 (State.Rebase). Every token is the log index of its grant,
// so every token the new cluster issues exceeds A+bump. The old cluster may
// have gone on after the backup and issued tokens up to its last index L,
// which were lost with it; the restored tokens exceed them all as long as
// L - A < bump: bump must exceed the number of log entries the old cluster
// wrote after the backup. A busy node writes some thousands of entries a
// second, a billion (DefaultRestoreBump) lasts about three years of that.

// DefaultRestoreBump is the default margin between the index of a backup
// and the first index of a cluster restored from it.
const DefaultRestoreBump = 1_000_000_000

// ErrRebase is returned by Rebase when the new index is not above the
// applied one.
var ErrRebase = errors.New("lease: rebase must move the applied index forward")

// Backup returns a copy of snap in which every current lease is ended: its
// key remembers its token, as a released key does. Keys are remembered in
// the order of their tokens, after the keys freed earlier.
func (snap *Snapshot) Backup() *Snapshot {
	b := &Snapshot{applied: snap.applied}
	b.idle = append(make([]idleKey, 0, len(snap.idle)+snap.leases.Len()), snap.idle...)
	ended := make([]idleKey, 0, snap.leases.Len())
	snap.leases.Scan("", func(l Lease) bool {
		ended = append(ended, idleKey{l.Key, l.Token})
		return true
	})
	sortIdle(ended)
	b.idle = append(b.idle, ended...)
	return b
}

// Applied returns the log index the snapshot was taken at.
func (snap *Snapshot) Applied() uint64 { return snap.applied }

// Rebase makes a restored state the start of a new log at index at: every
// current lease ends (its key remembers its token) and Applied becomes at,
// so the next entry applied is at+1 or later and its tokens exceed at.
func (s *State) Rebase(at uint64) error {
	if at <= s.applied {
		return fmt.Errorf("%w: %d is not above %d", ErrRebase, at, s.applied)
	}
	ended := make([]idleKey, 0, s.Len())
	s.EachHeld(func(l *Held) bool {
		ended = append(ended, idleKey{l.Key, l.Token})
		return true
	})
	sortIdle(ended)
	for _, e := range ended {
		s.drop(s.lookup(e.key))
		s.remember(e.key, e.token)
	}
	s.applied = at
	return nil
}

// sortIdle orders keys by token, then name, so that every node restoring
// the same backup builds the same state.
func sortIdle(keys []idleKey) {
	slices.SortFunc(keys, func(a, b idleKey) int {
		return cmp.Or(cmp.Compare(a.token, b.token), cmp.Compare(a.key, b.key))
	})
}
