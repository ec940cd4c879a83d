// Package membership is a node's place in its raft cluster: forming or
// joining a cluster on an empty data directory ([Formation]), what the node
// says of itself on the peer port's handshake and how it takes an
// admission ([Handshake]), the ClusterService over raft's configuration
// ([Service]), the members' client URLs the leader publishes through the
// log ([Publisher]), the initial cluster a node is configured with
// ([ParseInitialCluster], [Config.Validate]) and what GET /v1/role answers
// ([Role]).
//
// A cluster is formed the way etcd forms one: every node starts with the
// same list of members and their raft addresses (the node's
// --initial-cluster n1=HOST:PORT,n2=...), and its own name in it. A node
// whose data directory holds no raft state bootstraps with that list once
// every other member in it has answered (internal/peers: a member that lost
// its data directory must not form the cluster again); the nodes elect a
// leader once a majority runs. A node restarted on its data directory
// rejoins with the membership stored there and ignores the list. With no
// list, a node is a cluster of one. A node started with --join, or
// --initial-cluster-state existing, on an empty data directory waits to be
// added (fencectl member add) and does not vote until it is. A member that
// lost its data directory comes back as a new member: fencectl member
// remove ID; empty its data directory; start it with --join; fencectl
// member add ID RAFTHOST:PORT.
//
// Guarantees:
//   - Formation bootstraps a cluster of several only after every other
//     initial member answered as the node the list names. It joins a
//     cluster a peer already formed only if that cluster's initial members
//     record this member's current instance, and refuses
//     (peers.ErrMemberBootstrapped) otherwise; it never bootstraps a node
//     that waits to be added. (The SilentRebootstrap failpoint, a mutant
//     for the tests to catch, bootstraps without asking.)
//   - Handshake.Admit takes only an admission that names this node, and
//     the identity it saves (votes, cluster) is durable before it answers.
//   - AddMember checks the node at the address first: it must answer, be
//     the member named, and, unless it already votes in this cluster (a
//     change of address or suffrage), it is admitted over the peer port
//     before raft adds it. A member still in the configuration whose node
//     started on a new data directory is refused (apierr.ErrMemberNotAddable)
//     until it is removed, so that no configuration counts its lost votes.
//   - Changes (AddMember, RemoveMember, TransferLeadership) run on the
//     leader; any other node forwards them once, and a forwarded call is
//     never forwarded again. An ID not in the configuration is
//     apierr.ErrUnknownMember. TransferLeadership answers once this node
//     knows of another leader (at once when asked to transfer to itself).
//   - The Publisher writes a member's client URL only when it changed, keeps
//     the last URL of a member that does not answer, forgets the URL of a
//     server no longer in the configuration, and records another member's
//     URL only if the member answered under its own ID with a URL that
//     passes ValidateClientURL.
//
// Not guaranteed:
//   - AddMember without NonVoter adds a voter at once: raft counts it in
//     the quorum as soon as the configuration entry commits, before it has
//     caught up with the log; there is no non-voting stage before
//     promotion. Adding it as a non-voter first is the caller's choice.
//   - A membership change waits for raft to accept it for at most 10
//     seconds (another change in progress) and fails then.
//   - ListMembers and RaftRole read this node's configuration, which a
//     follower may hold behind the leader's; they are not forwarded.
//   - A client URL is what its member said, not checked to answer; a
//     member whose URL changed is listed with its old one until the leader
//     next asks it (every second).
//
// Forwarding to the leader, naming the caller on a forwarded call,
// authorization, and the node's readiness are the node's, passed in.
package membership
