package admission

import (
	"net"
	"net/http"
)

// ForwardedClientHeader names the address of the client whose call a
// follower forwards to the leader.
const ForwardedClientHeader = "Fenced-Forwarded-Client"

// ClientIP is the host part of a remote address; the address itself when
// it has no port.
func ClientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// CallerAddr is the address r's call is counted against: the TCP peer's
// IP, or over the peer port (peer true) the address a forwarding node
// names in ForwardedClientHeader. On the public port the header is removed
// from r, so that nothing further in trusts it.
func CallerAddr(r *http.Request, peer bool) string {
	if fwd := r.Header.Get(ForwardedClientHeader); peer && fwd != "" {
		return fwd
	} else if !peer {
		delete(r.Header, ForwardedClientHeader) // canonical already: Header.Del would canonicalize it again
	}
	return ClientIP(r.RemoteAddr)
}
