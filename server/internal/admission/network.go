package admission

import "net/netip"

// Networks groups client addresses by network: the IPv4 addresses that
// share their first V4 bits, the IPv6 addresses that share their first V6
// bits. A client free to send from many addresses of its network (any
// host with a /24 or an IPv6 /64 routed to it) gets one network's share,
// not one per address; clients of different networks do not share.
type Networks struct{ V4, V6 int }

// Of is the network of the client address addr ("10.1.2.0/24"); an
// IPv4-mapped IPv6 address is taken as IPv4. An address that is not an IP
// (a Unix socket's) is its own network.
func (n Networks) Of(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	bits := n.V6
	if ip.Is4() {
		bits = n.V4
	}
	p, err := ip.WithZone("").Prefix(bits)
	if err != nil {
		return addr
	}
	return p.String()
}
