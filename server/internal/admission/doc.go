// Package admission keeps the per-client shares of a node's HTTP front:
// how many calls, leases and streams each client address has, and which
// one more it may not take.
//
// Without authentication a client is free to name a new owner for every
// call, so per-owner quotas alone do not stop one client from taking every
// slot. A client is therefore also counted by the IP address its
// connection comes from (ClientIP): calls in progress (CallSlots), current
// leases (Leases) and open streams (StreamLimiter). The connections
// themselves are capped by internal/httplimit's listener; RefusalLog keeps
// its refusals from flooding the log.
//
// Guarantees: a CallSlots or StreamLimiter never has more than its limit
// taken for one address, and a slot given back more than once is given
// back once. Leases counts each lease of a key once, against the address
// it was last granted to, until it ends; a lease that ended before it was
// recorded is not counted.
//
// Not guaranteed: fairness between clients behind one address. Forwarded
// headers (X-Forwarded-For, Forwarded) are never read, so every client
// behind one NAT or proxy shares one address's shares; only the header a
// forwarding node sets over the peer port (CallerAddr) names another
// address. The package decides nothing about what refusals look like on
// the wire or in metrics: its callers map them.
package admission
