package fence

import (
	"context"
	"unicode"
	"unicode/utf8"
)

// MaxOwnerBytes is the longest owner a guard carries, the lease service's
// limit for owners.
const MaxOwnerBytes = 256

// Owned is implemented by leases that know their owner (*client.Lease
// does). The lease-taking calls of the guards and the client transports
// pass the owner on beside the token, so that a rejection can say whose
// epoch was fenced off. A lease without it works the same, anonymously.
type Owned interface {
	Owner() string
}

type ownerKey struct{}

// WithOwner returns ctx carrying owner, the lease owner a mutation is made
// for. Guards copy it into Decision.Owner for their observers. The owner is
// informational: it never takes part in a fencing decision. An owner that
// ValidOwner refuses is not carried.
func WithOwner(ctx context.Context, owner string) context.Context {
	if owner == "" || !ValidOwner(owner) {
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner WithOwner put in ctx, or "".
func OwnerFromContext(ctx context.Context) string {
	o, _ := ctx.Value(ownerKey{}).(string)
	return o
}

// ValidOwner reports whether owner can be carried beside a token: at most
// MaxOwnerBytes of printable UTF-8, the lease service's rule for owners.
func ValidOwner(owner string) bool {
	if len(owner) > MaxOwnerBytes || !utf8.ValidString(owner) {
		return false
	}
	for _, r := range owner {
		if !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
}

// LeaseContext returns ctx carrying the owner of l when l knows it (see
// Owned), and the next sequence of l when l comes from Sequenced and ctx has
// no sequence yet (SequenceContext). Every lease-taking call of the guards
// uses it; so can guards of your own.
func LeaseContext(ctx context.Context, l Lease) context.Context {
	ctx = SequenceContext(ctx, l)
	if o, ok := l.(Owned); ok {
		return WithOwner(ctx, o.Owner())
	}
	return ctx
}

// withOwner fills d.Owner from ctx; the guards call it before observing.
func withOwner(ctx context.Context, d Decision) Decision {
	d.Owner = OwnerFromContext(ctx)
	return d
}
