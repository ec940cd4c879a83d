package peers

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A node listening on a loopback address other than 127.0.0.1 dials its
// peers from that address, so that a proxy in front of a peer can tell
// which node a connection comes from.
func TestPeerDialFromListenIP(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	for _, tc := range []struct{ listen, wantIP string }{
		{"127.0.0.12:0", "127.0.0.12"},
		{"127.0.0.1:0", "127.0.0.1"},
	} {
		m, err := Listen(tc.listen, "", nil, nil, nil)
		if err != nil {
			t.Skipf("cannot listen on %s: %v", tc.listen, err)
		}
		// The target says no hello: the dial fails once it is closed.
		dialed := make(chan error, 1)
		go func() {
			_, err := m.Dial(raft.ServerAddress(target.Addr().String()), 5*time.Second)
			dialed <- err
		}()
		in, err := target.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := in.RemoteAddr().(*net.TCPAddr).IP.String(); got != tc.wantIP {
			t.Errorf("listening on %s: dialled from %s, want %s", tc.listen, got, tc.wantIP)
		}
		in.Close()
		<-dialed
		m.Close()
	}
}
