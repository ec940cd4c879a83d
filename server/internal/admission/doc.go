// Package admission is what a node's HTTP front does with a connection
// and a request before any API method runs: it keeps the per-client
// shares (how many calls, leases and streams each client address has, and
// which one more it may not take), carries what is learnt of a request's
// caller in its context, and explains the refusals connect-go makes on its
// own.
//
// Without authentication a client is free to name a new owner for every
// call, so per-owner quotas alone do not stop one client from taking every
// slot. A client is therefore also counted by the IP address its
// connection comes from (ClientIP): calls in progress (CallSlots,
// LimitCalls), current leases (Leases) and open streams (StreamLimiter);
// and, since anyone with a /24 or an IPv6 /64 can send from each of its
// addresses, by the network the address is in (Networks), which gets a
// larger share of its own. LimitCalls then lets a call be worked on only
// when it gets a place in a FairGate: at most so many calls at once, in
// turns by network, the network that has held places for the least time
// first, so that a flood waits behind the others' calls rather than in
// front of them.
// The connections themselves are capped by internal/httplimit's listener;
// RefusalLog keeps its refusals from flooding the log. With auth on, a
// principal's share of leases also counts those it was granted under
// other owners' names, which the log does not record: OwnerOverrides
// remembers them, per principal, on the node that granted them.
//
// Each request through WithCallerAddr carries one context value, filled in
// by each layer in turn: the caller's address (ClientAddr, ForwardClient),
// its call slot (LimitCalls, ReleaseSlot) and what authentication found
// (WithAuth, AuthOf): one allocation and one copy of the request for all
// of them. BufferedListener puts a read buffer under each connection;
// ExplainRefusals gives connect-go's bodiless 415 and 505 answers a
// plain-text body that says what to send instead.
//
// Guarantees: a CallSlots or StreamLimiter never has more than its limit
// taken for one address (or network), and a slot given back more than once
// is given back once. A FairGate never has more than its capacity of
// places taken; a freed place goes to a waiting call of the network with
// the least use (time held, counted from when it last became busy), and a
// call waits only while the gate is full or others wait before it. LimitCalls answers a call beyond its address's slots before
// its body is read and, over HTTP/1.1, closes the connection after the
// answer; a call it admits holds its slot until it ends or gives it back.
// Leases counts each lease once, against the address it was granted to,
// until it ends; a lease that ended before it was recorded is not
// counted. OwnerOverrides counts only leases still current in the
// state it is given once they could decide a refusal (they reach the room
// asked about), and looks again at a principal's entries each time they
// double (from 64), so that they stay within about twice its current
// leases. ExplainRefusals changes no status code and nothing of an
// answer that has begun or that is not a 415 or a 505.
//
// Not guaranteed: fairness between clients behind one address, or between
// the addresses of one network (turns are by network); that a call's cost
// is its use of the cores: a place is held for the call's whole time,
// waits on the log's disk included; fairness against many networks at
// once (a botnet): each gets its turn. Forwarded
// headers (X-Forwarded-For, Forwarded) are never read, so every client
// behind one NAT or proxy shares one address's shares; only the header a
// forwarding node sets over the peer port (CallerAddr) names another
// address. Calls that did not come over HTTP (the Go API) have no address
// and take no share. OwnerOverrides knows only the leases its node
// granted: after a leader change the others count against their owner
// alone. The package decides neither who a caller is (internal/security
// authenticates; the package only carries the result) nor what a quota or
// share's refusal looks like on the wire or in metrics: its callers map
// them.
package admission
