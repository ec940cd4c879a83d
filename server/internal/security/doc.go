// Package security reads and holds what a fenced node trusts: TLS
// certificates for the API and the peer port, the auth policy (bearer
// tokens, client certificates, rules) and the keys grants are signed with.
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
//
// Not guaranteed: nothing here decides who a request came from on the
// wire beyond the request itself (the node trusts a forwarded principal
// only on its peer port), and without peer TLS the peer port is
// unauthenticated. The package knows nothing of raft or leases.
package security
