// Package security reads and holds what a fenced node trusts: TLS
// certificates for the API and the peer port, the auth policy (bearer
// tokens, client certificates, rules) and the keys grants are signed with;
// and applies the policy to HTTP requests and Connect calls (HTTPAuth,
// CheckInterceptor).
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
//
// Not guaranteed: nothing here decides who a request came from on the
// wire beyond the request itself (the node trusts a forwarded principal
// only on its peer port), and without peer TLS the peer port is
// unauthenticated. Which port a request came in on, where the outcome is
// kept and how the node authorizes a caller are the node's to say
// (HTTPAuth's fields), as is the Connect code of a refusal
// (CheckInterceptor.Wire). The package knows nothing of raft or leases.
package security
