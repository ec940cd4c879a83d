package peers

import (
	"net"
	"testing"
)

// Peers listening on a loopback address other than 127.0.0.1 dial from it,
// so that a proxy can tell them apart; others leave the source to the
// system.
func TestDialSource(t *testing.T) {
	for _, tc := range []struct {
		listen string
		want   string // "" for none
	}{
		{"127.0.0.2:7421", "127.0.0.2:0"},
		{"127.0.0.1:7421", ""},
		{"[::1]:7421", ""},
		{"10.0.0.1:7421", ""},
		{"0.0.0.0:7421", ""},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		got := dialSource(addr)
		if (got == nil) != (tc.want == "") || (got != nil && got.String() != tc.want) {
			t.Errorf("dialSource(%s) = %v, want %q", tc.listen, got, tc.want)
		}
	}
}
