package admission

import (
	"errors"
	"fmt"
	"sync"
)

// ErrTooManyStreams refuses a stream beyond a StreamLimiter's limits.
var ErrTooManyStreams = errors.New("too many streams")

// StreamLimiter caps open streams of one kind, in total, per client
// address and per client network.
type StreamLimiter struct {
	kind                       string // "watchers", "event subscribers": named in errors
	flag                       string // "max-watchers", "max-event-subscribers": the flag setting max
	max, perClient, perNetwork int
	networks                   Networks
	refused                    func(limit string)

	mu    sync.Mutex
	total int
	byIP  map[string]int // by address and by network: a network's name has a '/', an address none
}

// NewStreamLimiter caps streams of kind at max in total, perClient per
// address and perNetwork per network of networks. flag names the setting
// of max, flag+"-per-client" that of perClient and flag+"-per-network"
// the share of networks: refused, if not nil, is told the one that
// refuses each stream.
func NewStreamLimiter(kind, flag string, max, perClient, perNetwork int, networks Networks, refused func(limit string)) *StreamLimiter {
	return &StreamLimiter{kind: kind, flag: flag, max: max, perClient: perClient, perNetwork: perNetwork, networks: networks,
		refused: refused, byIP: make(map[string]int)}
}

func (l *StreamLimiter) refuse(limit string) {
	if l.refused != nil {
		l.refused(limit)
	}
}

// Open is how many streams hold slots.
func (l *StreamLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Acquire takes a slot for a stream from ip, or says which limit is full
// (ErrTooManyStreams). The returned func gives the slot back, once.
func (l *StreamLimiter) Acquire(ip string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		l.refuse(l.flag)
		return nil, fmt.Errorf("%w: %d %s open on this server (limit %d)", ErrTooManyStreams, l.total, l.kind, l.max)
	}
	if l.byIP[ip] >= l.perClient {
		l.refuse(l.flag + "-per-client")
		return nil, fmt.Errorf("%w: %d %s open from %s (limit %d per client)", ErrTooManyStreams, l.byIP[ip], l.kind, ip, l.perClient)
	}
	network := l.networks.Of(ip)
	if network != ip && l.byIP[network] >= l.perNetwork {
		l.refuse(l.flag + "-per-network")
		return nil, fmt.Errorf("%w: %d %s open from the network %s (limit %d per network)", ErrTooManyStreams, l.byIP[network], l.kind, network, l.perNetwork)
	}
	counted := []string{ip}
	if network != ip {
		counted = append(counted, network)
	}
	l.total++
	for _, k := range counted {
		l.byIP[k]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			for _, k := range counted {
				if l.byIP[k]--; l.byIP[k] <= 0 {
					delete(l.byIP, k)
				}
			}
		})
	}, nil
}
