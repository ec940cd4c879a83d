// Package bench compares fenced with etcd and ZooKeeper on the same lease
// workloads, on one machine, over loopback.
//
// Run starts each system in its own processes (fenced built from this
// repository's cmd/fenced, etcd as cmd/etcdnode around
// go.etcd.io/etcd/server/v3/embed, ZooKeeper as installed by Debian's
// zookeeper package; one node, or three forming a cluster),
// then runs every selected workload against each with the same client
// counts, alternating systems run by run, and reports the median of the
// rounds, with the CPU time per operation of the servers and of the
// harness's clients. Each benchmark client has its own
// client object and so its own connection. Both servers fsync every commit
// (their defaults; ZooKeeper's forceSync) and keep their data in a fresh
// temporary directory.
//
// Guarantees: the server processes listen only on loopback addresses and do
// not outlive Run: they are stopped when it returns, when its context ends,
// and (through the parent-death signal, and for etcdnode also the end of its
// standard input) when the harness process itself dies.
//
// Non-guarantees: the figures are those of one run on one machine, with
// client and servers sharing its cores; repeated runs of the same build
// commonly differ by 20-40%, so a ratio says more than an absolute number
// and small differences mean nothing. The workloads exercise each system
// through its usual Go client (fenced's client package, etcd's
// clientv3/concurrency, go-zookeeper's lock recipe), so client-side costs
// are part of what is measured. ZooKeeper has no renewal of one lock (a
// session's heartbeat keeps all its locks), so it runs no renew workload.
package bench
