// Package fencereport sends the stale rejections a guard makes to fenced, so
// that the lease service can show whose epoch was fenced off by whose:
// fenced resolves both tokens to their owners and grant times, counts the
// rejections per scope and per resource, logs them, exports them as metrics,
// lists them (fencectl rejections) and shows them on its dashboard.
//
// A Reporter is a fence.Observer: give it to any guard, beside other
// observers.
//
//	rep, err := fencereport.New(fencereport.Config{Resource: "ledger-http", Sender: fencedClient})
//	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Observer: rep})
//	defer rep.Close(ctx)
//
// Guarantees:
//   - Observe never waits for the network and never fails: it puts the
//     rejection in a bounded queue (a map lookup under a mutex) and returns.
//     The guarded write's outcome and latency do not depend on fenced being
//     up, slow or down.
//   - Memory is bounded: at most QueueSize entries wait, plus one batch of
//     at most QueueSize entries in flight. Identical rejections (same scope,
//     tokens and owner) share one entry with a count.
//   - Every rejection is accounted for: Sent + Dropped + Pending counts
//     every rejection observed.
//
// Non-guarantees:
//   - Reports are best effort. A full queue drops new rejections, and a
//     batch that fenced does not accept (down, slow beyond SendTimeout,
//     refusing) is dropped, not retried; Dropped counts them (the
//     fenced_reporter_dropped_total metric, with fenceprom.RegisterReporter). Nothing is
//     lost at the resource: the rejection itself happened and was returned
//     to the writer whatever becomes of its report.
//   - Reports arrive up to FlushInterval late, longer after failures (the
//     reporter backs off up to a minute while fenced does not answer).
//   - Accepted writes are not reported.
//
// The package does not link the Prometheus client: fence/fenceprom's
// RegisterReporter exports Sent, Dropped and Pending as metrics.
package fencereport
