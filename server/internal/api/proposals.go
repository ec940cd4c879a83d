package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
)

// ProposalsHeader carries an acquisition's Proposals to the node that
// continues it (routedService.Acquire): the digests, comma-separated.
const ProposalsHeader = "Fenced-Acquire-Proposals"

// maxProposals bounds the digests kept, and read from ProposalsHeader: the
// latest, since a call writes a grant only once its earlier ones have
// ended or failed.
const maxProposals = 64

// Proposals are the grants one Acquire call has written to the log in any
// of its attempts: the lease IDs of the grants it proposed and of the
// handovers to it while it waited in line. Every grant entry carries a
// fresh random lease ID, so a current lease whose ID is among them is this
// call's own grant, committed after the attempt that wrote it lost its
// answer with the leadership; a lease with any other ID is not, even under
// the same owner. A call that continues after a leadership change answers
// the uncertain outcome when it finds its own grant, never waits behind it
// (docs/protocol.md, section 3.8).
//
// Only digests of the IDs are kept, and sent to other nodes: a lease ID is
// a capability, and recognising one needs no more. A caller that sets
// ProposalsHeader itself can only make its own call's outcome uncertain.
//
// Safe for concurrent use. A nil *Proposals records nothing and holds
// nothing: calls that did not come through the API (the Go API) have none.
type Proposals struct {
	mu      sync.Mutex
	digests []string
}

// ParseProposals returns the proposals named by a ProposalsHeader value,
// never nil.
func ParseProposals(h string) *Proposals {
	p := &Proposals{}
	for d := range strings.SplitSeq(h, ",") {
		if d = strings.TrimSpace(d); d != "" {
			p.digests = append(p.digests, d)
		}
	}
	p.trim()
	return p
}

// trim keeps the latest maxProposals digests.
func (p *Proposals) trim() {
	if n := len(p.digests); n > maxProposals {
		p.digests = slices.Delete(p.digests, 0, n-maxProposals)
	}
}

// String is the ProposalsHeader value of p.
func (p *Proposals) String() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.digests, ",")
}

// Add records that the call wrote grants of the lease IDs ids.
func (p *Proposals) Add(ids ...string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		p.digests = append(p.digests, digest(id))
	}
	p.trim()
}

// Any reports whether the call wrote any grant.
func (p *Proposals) Any() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.digests) > 0
}

// Made reports whether the lease with ID id is one of the call's grants.
func (p *Proposals) Made(id string) bool {
	if p == nil {
		return false
	}
	d := digest(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.digests, d)
}

// digest is a lease ID's digest: 128 bits of its SHA-256, in hex.
func digest(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

type proposalsKey struct{}

// WithProposals returns ctx carrying p, the proposals of its Acquire call.
func WithProposals(ctx context.Context, p *Proposals) context.Context {
	return context.WithValue(ctx, proposalsKey{}, p)
}

// ProposalsOf returns the proposals of ctx's Acquire call, nil if it has
// none.
func ProposalsOf(ctx context.Context) *Proposals {
	p, _ := ctx.Value(proposalsKey{}).(*Proposals)
	return p
}
