package admission

import (
	"net/http/httptest"
	"testing"
)

func TestClientIP(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.2:4000": "127.0.0.2",
		"[::1]:4000":     "::1",
		"192.0.2.9":      "192.0.2.9", // no port: the address itself
		"":               "",
	} {
		if got := ClientIP(addr); got != want {
			t.Errorf("ClientIP(%q) = %q, want %q", addr, got, want)
		}
	}
}

// The forwarded client address counts only on the peer port, where the
// calls other nodes forward arrive; on the public port the header is
// dropped and the connection's address counts.
func TestCallerAddrForwardedOnlyOverPeerPort(t *testing.T) {
	for _, peer := range []bool{false, true} {
		r := httptest.NewRequest("POST", "/", nil)
		r.RemoteAddr = "127.0.0.2:4000"
		r.Header.Set(ForwardedClientHeader, "192.0.2.9")
		got := CallerAddr(r, peer)
		header := r.Header.Get(ForwardedClientHeader)
		want, wantHeader := "127.0.0.2", ""
		if peer {
			want, wantHeader = "192.0.2.9", "192.0.2.9"
		}
		if got != want || header != wantHeader {
			t.Errorf("peer port %v: client address %q (header left %q), want %q (header %q)", peer, got, header, want, wantHeader)
		}
	}
	// Over the peer port, a call not forwarded counts against its peer.
	r := httptest.NewRequest("POST", "/", nil)
	r.RemoteAddr = "127.0.0.3:4000"
	if got := CallerAddr(r, true); got != "127.0.0.3" {
		t.Errorf("peer port, no header: client address %q, want 127.0.0.3", got)
	}
}
