// Package forward reaches the leader for the calls a node that does not
// lead serves: it finds the leader's raft address, holds the clients of the
// leader's API over the peer port, ends forwarded calls when the leader
// changes, and maps a failure to reach the leader to the caller's error.
//
// Any node serves every call. The leader serves Acquire, Renew, Release,
// Get and List itself; any other node forwards them to the leader over the
// peer port (internal/peers) with the caller's deadline, and hands back the
// leader's answer as it came: code, message and details. Watch is served by
// every node from the transitions it applied itself, which are the same on
// every node, in the same order and with the same revisions.
//
// Guarantees: a call reaching a node that is not the leader and has no
// leader to forward to waits up to 2 heartbeat timeouts for one
// ([Forwarder.LeaderAddr]), then is refused as not ready (unavailable); so
// is one waiting when the node's context ends. A call that was forwarded
// once (it carries api.ForwardedHeader) is never forwarded again
// ([Forwarder.LeaderFor]), so calls cannot loop while nodes disagree about
// who leads. A call run by [Call] ends at the first leader change this node
// observes after it started, answered unavailable with
// apierr.ErrLeaderChanged: it may or may not have taken effect at the old
// leader. A failure to reach the leader or to bring its answer back is
// answered unavailable, or with the end of the caller's own context
// (deadline_exceeded, canceled) once it ended ([Unreached]); an answer of the leader is handed back
// as it came. One LeaseService client is kept per raft address; all
// clients share one transport, whose idle connections Close closes.
//
// Not guaranteed: whether a forwarded call that got no answer took effect
// at the leader; that the leader found is still the leader when the call
// arrives (the leader refuses what it cannot serve, and the call is not
// forwarded again). Leader changes are what the node's Leadership
// observes: a change dropped while the observation channel is full is
// covered by those still queued, but a call at a leader that was cut off
// ends only when this node learns of a new leader, or with the caller's
// context. WatchLeader runs in a goroutine the node
// starts and waits for; the package starts none of its own. Naming the
// caller on a forwarded request, and deciding which calls a node serves
// itself, are the node's.
package forward
