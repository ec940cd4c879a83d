// Package nodemetrics holds a fenced node's Prometheus collectors: the
// counts of Acquire, Renew and Release by result and of refusals by limit,
// the latencies of lease API calls, applies and raft log writes, and the
// gauges and counters read from the node at scrape time (leadership,
// leases, waiters, raft position, transitions).
//
// Guarantees: New registers every collector, with the names, help texts,
// labels and buckets that dashboards and docs/observability.md rely on,
// and fails (registering nothing more) at the first that the Registerer
// refuses. Every result of fenced_acquisitions_total (granted, held,
// invalid, error), fenced_renewals_total and fenced_releases_total
// (renewed or released, not_found, invalid, error) and every limit of
// fenced_limit_refusals_total is served from the start, at zero. An
// outcome is counted by what its error is: nil is the success label, a
// lease.HeldError held, lease.ErrNotHeld not_found, apierr.ErrInvalid
// invalid, anything else error; an acquisition a limit refused
// (apierr.QuotaError, ErrTooManyLeases, ErrTooManyLeaseBytes, ErrTooManyWaiters) counts also as
// a refusal by that limit's flag. No label carries a key. The gauges and
// the transition counters read the Node's functions and Transitions at
// each scrape, and the raft gauges read 0 while the node has no raft.
//
// Not guaranteed: the collectors count only what the node reports through
// them; that every call is counted once, and on which node (a forwarded
// call is counted where it was received), is the node's. Transitions start
// at zero with each process and exclude the log's replay at start-up, as
// the node counts them. The Go runtime and process collectors are the
// node's configuration's, not this package's. Refused takes any limit name;
// only those of the fixed list are served before their first refusal.
package nodemetrics
