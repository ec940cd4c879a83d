// Package failpoint holds deliberate bugs (mutants) that the torture
// harness must catch. Each is a named check placed in the server, the lease
// state machine, the raft log store or the guards; a torture run with one
// switched on must report violations, which measures what the checkers can
// see.
//
// The checks are compiled in only under the build tag fenced_failpoints
// (in the spirit of etcd's gofail). Without the tag Enabled is a constant
// false, every guarded branch is dead code the compiler removes, and the
// storage wrappers of package failstore return their argument: a release
// binary carries none of it.
//
// This package depends on the standard library only, so that the lease
// state machine and package fence, which ask Enabled, stay light for every
// importer.
//
// With the tag, the mutants of a process are named, comma-separated, in
// the environment variable FENCED_FAILPOINTS, read once at start:
//
//	FENCED_FAILPOINTS=expire-half-ttl,renew-no-extend ./fenced ...
//
// An unknown name is reported by Check, so that a typo cannot make a
// mutant run silently pass.
package failpoint

import (
	"fmt"
	"os"
	"strings"
)

// EnvVar names the mutants switched on in a tagged build.
const EnvVar = "FENCED_FAILPOINTS"

// Name is one mutant.
type Name string

// The mutants. Each says the bug it puts in.
const (
	// ExpireHalfTTL expires a lease half its TTL after its grant or last
	// renewal (server expirer).
	ExpireHalfTTL Name = "expire-half-ttl"
	// RenewNoExtend acknowledges a renewal without moving the deadline
	// (server expirer).
	RenewNoExtend Name = "renew-no-extend"
	// HandoverOldToken gives the grant of a handover the previous
	// holder's token instead of a new one (lease state machine).
	HandoverOldToken Name = "handover-old-token"
	// GrantHeld grants about one acquisition in sixteen of a held key,
	// evicting its holder: in the server, which expires the holder and
	// grants (chosen at random, before anything is written: the torture
	// meets it), and in the lease state machine, which grants an
	// acquisition of a held key whose log index is a multiple of 16
	// (deterministic on replay; the server writes such an acquisition
	// only when two race, so lease's property test is what meets it).
	GrantHeld Name = "grant-held"
	// ReleaseAnyID lets a release with any lease ID end the current lease
	// of its key (lease state machine and server).
	ReleaseAnyID Name = "release-any-id"
	// LogAckBeforeWrite makes the raft log store acknowledge StoreLogs
	// before the write is done: it is written later, in the background, so
	// a kill right after an acknowledgement loses it (failstore.WrapLogStore).
	LogAckBeforeWrite Name = "log-ack-before-write"
	// RestoreDropsLeases makes a snapshot restore forget the current
	// leases (their keys become free; lease.Restore).
	RestoreDropsLeases Name = "restore-drops-leases"
	// DeposedLeaderRenews lets a node that once led go on acknowledging
	// renewals itself after it lost the leadership, from its own copy of
	// the deadlines, without forwarding them or confirming that it leads
	// (server: Renew skips the readiness and quorum-contact checks; every
	// other call is forwarded as usual, so clients stay with the node).
	// Only a cluster run (a paused, partitioned or outvoted leader) can
	// catch it.
	DeposedLeaderRenews Name = "deposed-leader-renews"
	// LogSkipFsync never fsyncs the raft log's segment files: their Sync
	// returns at once (failstore.WrapVFS). A kill -9 cannot show it, since the page
	// cache outlives the process; a simulated power loss
	// (LoseUnsyncedEnvVar) loses the acknowledged entries.
	LogSkipFsync Name = "log-skip-fsync"
	// SilentRebootstrap lets a member started on an empty data directory
	// with --initial-cluster bootstrap at once and vote, without asking
	// its peers whether they already count it with another directory
	// (server bootstrap): a member that lost its disk votes with amnesia.
	// Only a run that deletes a member's data directory while it is down
	// and starts it again with its usual command line can catch it.
	SilentRebootstrap Name = "silent-rebootstrap"
	// LogAckEarly is LogAckBeforeWrite without the added delay: each
	// batch is written by the background goroutine as soon as it gets to
	// it, a fraction of a millisecond after the acknowledgement. Only a
	// kill aimed at the acknowledgement from the node's side
	// (AckNotifyEnvVar), a simulated power loss, lands in that gap.
	LogAckEarly Name = "log-ack-early"
	// NewLeaderNoFreshTTL makes a new leader keep the deadlines it tracked
	// as a follower (grant plus TTL: renewals are not in the log) instead
	// of giving every lease a fresh full TTL on takeover (server).
	NewLeaderNoFreshTTL Name = "new-leader-no-fresh-ttl"
	// RenewWithoutQuorumContact acknowledges a renewal without confirming
	// that this node still leads (server: Renew skips the quorum-contact
	// round and checks only the term it knows; nothing else changes: a
	// node that is not ready still refuses, others forward). A leader
	// that is deposed and does not know it yet, a paused one waking up
	// say, renews from its own deadlines.
	RenewWithoutQuorumContact Name = "renew-without-quorum-contact"
	// ReelectedLeaderOldDeadlines makes a node that leads again, in the
	// same process, keep the deadlines it held when it last led (its old
	// term's renewals; grants and ends applied since) instead of giving
	// every lease a fresh full TTL (server). A lease renewed at the leader
	// in between is expired early. Only a re-election of the same node
	// while its holders renew elsewhere (the leader-reelect fault) shows
	// it.
	ReelectedLeaderOldDeadlines Name = "reelected-leader-old-deadlines"
	// GuardReappliesEqualSequence makes the guards apply a write whose
	// (token, sequence) equals the last one applied, instead of refusing
	// it as a duplicate: those built on fence.CheckSequence (the reference
	// store's fencebolt, fencesql, the in-memory guard) and the Redis
	// guard's Lua script. A resent write is applied twice. Only a worker
	// that resends a write whose outcome it does not know can catch it.
	GuardReappliesEqualSequence Name = "guard-reapplies-equal-sequence"
	// FollowerLocalRead makes a follower answer a linearizable Get from its
	// own applied state instead of forwarding it to the leader (server).
	FollowerLocalRead Name = "follower-local-read"
	// HelloAcceptsAnyCluster makes the peer port accept a peer of another
	// cluster: the hello's cluster IDs are no longer compared (peers). A
	// member started on another cluster's data directory, or restored from
	// another backup, then talks to raft as if it belonged. Only a run
	// that shows a node another cluster's peers (the torture's
	// foreign-cluster and cluster-restore faults) can catch it.
	HelloAcceptsAnyCluster Name = "hello-accepts-any-cluster"
	// AcksIgnored makes a member accept a peer whose log ends before what
	// that peer acknowledged to it (peers.Acks.Check refuses nobody): a
	// member started on an older copy of its data directory is taken back
	// as if it had only lagged. Only a run that rolls a member back (the
	// torture's rollback fault) can catch it.
	AcksIgnored Name = "acks-ignored"
	// LostLogVotes lets a member whose identity names a raft log it no
	// longer holds (wal/ deleted, member.json kept) start on a new, empty
	// log under its old identity, and vote (peers.OpenIdentity). Only a
	// run that deletes a member's log and keeps its identity (the
	// torture's wal-loss fault) can catch it.
	LostLogVotes Name = "lost-log-votes"
	// RestoreIgnoresBumpAndFloor makes fenced restore write members that
	// pass for members of the backed-up cluster (restore.Write): no cluster
	// ID of their own (the backup carries none, and a hello without one
	// is refused by nobody) and first term 1 instead of their first index.
	// A member of the old cluster brought back beside them is taken in,
	// and at its higher term it can lead them. The start index, and so
	// the tokens, still jump. Only a run that restores a cluster and shows
	// it a member of the old one (the torture's cluster-restore and
	// foreign-cluster faults) can catch it.
	RestoreIgnoresBumpAndFloor Name = "restore-ignores-bump-and-floor"
	// ConsumerAppliesStale makes the torture's queue consumer (package
	// internal/torture/queue) make the effect of a message that fencemsg
	// decided stale anyway, in a transaction of its own, and ack it as
	// applied: a consumer that takes the guard's verdict for advice. Only
	// a run with the queue path (Config.QueueURL) can catch it.
	ConsumerAppliesStale Name = "consumer-applies-stale"
)

// All lists every mutant, in the order the mutant test runs them.
var All = []Name{ExpireHalfTTL, RenewNoExtend, HandoverOldToken, GrantHeld, ReleaseAnyID, LogAckBeforeWrite, RestoreDropsLeases, DeposedLeaderRenews, LogSkipFsync, SilentRebootstrap,
	LogAckEarly, NewLeaderNoFreshTTL, RenewWithoutQuorumContact, FollowerLocalRead, ReelectedLeaderOldDeadlines,
	GuardReappliesEqualSequence, HelloAcceptsAnyCluster, AcksIgnored, LostLogVotes, RestoreIgnoresBumpAndFloor, ConsumerAppliesStale}

// LoseUnsyncedEnvVar, set to 1 in a tagged build, makes every crash of the
// process a simulated power loss for its durable files: what it wrote
// since the last fsync or commit is gone when it starts again (see
// package failstore).
const LoseUnsyncedEnvVar = "FENCED_LOSE_UNSYNCED"

// AckNotifyEnvVar, in a tagged build, names a Unix datagram socket to
// which the node's API sends one datagram right after it has written the
// successful answer to an Acquire, Renew or Release (WrapAckHandler): the
// torture harness kills the node within a millisecond of an
// acknowledgement, timed from the node's side.
const AckNotifyEnvVar = "FENCED_ACK_NOTIFY"

// LogStallEnvVar, in a tagged build, names a file whose existence stalls
// the node's raft log writes: while it exists, every StoreLogs waits (and
// first creates the file named with ".caught" appended, so that the
// torture harness knows a write hangs). Raft's leader writes its own log
// in its main loop, so a leader whose write hangs runs none of its checks:
// not its leader lease, not a step-down. The harness's leader-disk-stall
// fault uses it.
const LogStallEnvVar = "FENCED_LOG_STALL"

// Parse splits a FENCED_FAILPOINTS value into names, rejecting unknown ones.
func Parse(v string) ([]Name, error) {
	var out []Name
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		known := false
		for _, n := range All {
			known = known || Name(f) == n
		}
		if !known {
			return nil, fmt.Errorf("failpoint: unknown mutant %q in %s", f, EnvVar)
		}
		out = append(out, Name(f))
	}
	return out, nil
}

// Check reports a FENCED_FAILPOINTS that this build cannot honour: a value
// in a build without the tag, or an unknown name. Processes that may run
// mutants call it at start, so that a mutant run never passes by accident.
func Check() error {
	if v := os.Getenv(AckNotifyEnvVar); v != "" && !Compiled {
		return fmt.Errorf("failpoint: %s=%q needs a binary built with the fenced_failpoints tag", AckNotifyEnvVar, v)
	}
	if lose := os.Getenv(LoseUnsyncedEnvVar); lose != "" && (!Compiled || lose != "1") {
		return fmt.Errorf("failpoint: %s=%q needs the value 1 and a binary built with the fenced_failpoints tag", LoseUnsyncedEnvVar, lose)
	}
	v := os.Getenv(EnvVar)
	if v == "" {
		return nil
	}
	if !Compiled {
		return fmt.Errorf("failpoint: %s=%q but this binary was built without the fenced_failpoints tag", EnvVar, v)
	}
	_, err := Parse(v)
	return err
}
