// Package k8s elects Kubernetes controllers through fenced: Lock is a
// client-go resourcelock.Interface backed by a fenced lease, so that
// leaderelection.RunOrDie, or a controller-runtime manager given it as
// LeaderElectionResourceLockInterface, elects through fenced, and the
// elected process holds a fencing token (Lock.Token, Lock.Lease) to present
// to the guards of everything it writes to.
//
// The election is the fenced lease key Name; the candidate's Identity is
// the lease's owner, so `fencectl elect NAME --listen` and client/election
// see the same leaders as client-go's elector.
//
// The elector's timing then means:
//
//   - LeaseDuration is the lease's TTL, in whole seconds (the record
//     carries seconds): the fenced server expires a leader that stopped
//     renewing after it. Candidates do not count it down themselves: each
//     Get asks the server, and while the server shows a holder the record
//     looks freshly renewed, so a candidate tries to acquire only once the
//     server has let the lease go.
//   - RenewDeadline is how long the elector goes on believing it leads once
//     its lease is lost: Update fails from the moment the client's
//     conservative local deadline passes (or a renewal is refused), and the
//     elector calls OnStoppedLeading after RenewDeadline of failures. The
//     lease's own context (Lease().Context()) ends at the loss itself; work
//     under it, not only under the elector's context.
//   - RetryPeriod is how often candidates ask the server and the leader
//     checks its lease. The lease renews itself every TTL/3 in the
//     background, whatever RetryPeriod is.
//
// Guarantees:
//   - At most one Lock holds the election on the server at any instant, and
//     each new leader's token is higher than every earlier one: a guard
//     refuses a former leader's late writes once the new one has written.
//   - A Lock serves one term. Once its lease is lost or released
//     (ReleaseOnCancel), every Update naming its identity fails: a lost
//     lease never comes back, and a new term needs a new Lock (and a new
//     elector), so the token read at OnStartedLeading is the term's only
//     token.
//
// Non-guarantees:
//   - Nothing stops a paused or slow leader from acting after its lease is
//     gone; client-go's elector notices only after RenewDeadline, and a stop
//     hook may block longer still. Only the token, checked where the write
//     lands, tells the two leaders apart (see docs/election.md and the
//     example in examples/splitbrain).
//   - Candidates are not served first come, first served: each tries to
//     acquire every RetryPeriod once the server shows the election free.
//   - RecordEvent does nothing: there is no Kubernetes object to attach
//     events to.
package k8s
