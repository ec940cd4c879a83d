package admission

import "testing"

func TestNetworksOf(t *testing.T) {
	n := Networks{V4: 24, V6: 64}
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.2", "127.0.0.0/24"},
		{"127.0.0.200", "127.0.0.0/24"},
		{"127.1.0.1", "127.1.0.0/24"},
		{"::ffff:10.1.2.3", "10.1.2.0/24"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"@", "@"},
		{"", ""},
	} {
		if got := n.Of(tc.addr); got != tc.want {
			t.Errorf("Networks{24, 64}.Of(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
	if got := (Networks{V4: 32, V6: 128}).Of("127.0.0.2"); got != "127.0.0.2/32" {
		t.Errorf("with /32, 127.0.0.2 is in %q, want its own network", got)
	}
}
