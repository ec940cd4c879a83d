// Package security reads and holds what a fenced node trusts: TLS
// certificates for the API and the peer port, the auth policy (bearer
// tokens, client certificates, rules) and the keys grants are signed with;
// and applies the policy to HTTP requests and Connect calls (HTTPAuth,
// CheckInterceptor) and to what a caller does with leases (Authorizer).
//
// Guarantees:
//   - Everything not granted by a rule is denied; a bearer secret is
//     looked up by its SHA-256, so the lookup's timing says nothing of it,
//     and an expired token authenticates no one.
//   - With peer TLS every peer connection is mutual TLS against the peer
//     CA; a certificate meant for clients only is refused (peertls.go).
//   - [State.Reload] swaps each file that loads; one that fails keeps its
//     previous contents, and the error names it. New handshakes and
//     requests see the new files; open connections keep theirs.
//   - [HTTPAuth.Authenticate] refuses nothing: it keeps what it found
//     (a principal or the error why there is none) for the handlers
//     further in. On the public port it removes the forwarded-principal
//     and relay headers before anything reads them; only on the peer port
//     are they taken as is. RequireHTTP and ProtectDashboard answer 401
//     without a principal and 403 without the permission;
//     CheckInterceptor answers a failed check before any handler runs.
//   - With auth on, [Authorizer] allows a caller only what a rule of the
//     policy grants its principal on a key starting with the rule's
//     prefix (a List or Watch prefix must itself be covered); a caller
//     without a principal is refused as unauthenticated (ErrUnauthenticated),
//     one without the permission with a [DeniedError] naming the
//     principal, permission and key. A principal renews and releases only
//     leases it owns, unless it holds the owner permission on the key; an
//     acquisition records the principal as the lease's owner unless it
//     holds the owner permission and names another. The cluster RPCs need
//     admin on every key (a rule with the empty prefix). A forwarded call
//     names the principal its caller authenticated as on this node.
//   - With auth off (no policy) every caller is Anonymous and may do
//     everything; the owner a request names is recorded as is.
//
// Not guaranteed: nothing here decides who a request came from on the
// wire beyond the request itself (the node trusts a forwarded principal
// only on its peer port), and without peer TLS the peer port is
// unauthenticated. Which port a request came in on, where the outcome is
// kept and how the node authorizes a caller are the node's to say
// (HTTPAuth's fields), as is the Connect code of a refusal
// (CheckInterceptor.Wire, Authorizer.Wire). The Authorizer does not
// validate keys (the node does, before it), and which lease is current is
// the node's lookup (Authorizer.Owner), read when asked: a lease that is
// not current passes the holder check, and a renewal racing its lease's
// end or reassignment is the state machine's to refuse. Each check reads
// the policy afresh, so a reload during a call may let its checks see two
// policies. The package knows nothing of raft or the state machine.
package security
