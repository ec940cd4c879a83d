package api

import (
	"errors"
	"fmt"
	"math"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Input limits of the wire contract.
const (
	// MaxKeyBytes bounds a key: fence.MaxScopeBytes.
	MaxKeyBytes = fence.MaxScopeBytes
	// MaxOwnerBytes bounds an owner: fence.MaxOwnerBytes.
	MaxOwnerBytes = fence.MaxOwnerBytes
	maxIDBytes    = 64
)

// ValidateKey applies fence.ValidateScope: a key is the scope its tokens
// fence, so the service and every guard share one rule, and the service
// never issues a token that a guard would refuse for its scope.
func ValidateKey(key string) error {
	err := fence.ValidateScope(key)
	if err == nil {
		return nil // before errors.As, whose target would escape: no allocation for a valid key
	}
	var se *fence.ScopeError
	if errors.As(err, &se) {
		return apierr.Invalidf("key %s", se.Reason)
	}
	return nil
}

// acquireTimes converts the TTL and wait of an Acquire request from
// milliseconds, refusing what no time.Duration can hold.
func acquireTimes(req *fencedv1.AcquireRequest) (ttl, wait time.Duration, err error) {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	for _, f := range []struct {
		name string
		ms   int64
		d    *time.Duration
	}{{"ttlMs", req.GetTtlMs(), &ttl}, {"waitMs", req.GetWaitMs(), &wait}} {
		if f.ms > maxMs || f.ms < -maxMs {
			return 0, 0, apierr.Invalidf("%s %d is outside every allowed range", f.name, f.ms)
		}
		*f.d = time.Duration(f.ms) * time.Millisecond
	}
	return ttl, wait, nil
}

// validatePrefix checks the prefix of a List or Watch: empty (every key),
// or a valid key.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidateKey(prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

// ValidateOwner checks an owner: at most MaxOwnerBytes of printable UTF-8.
func ValidateOwner(owner string) error {
	if len(owner) > MaxOwnerBytes {
		return apierr.Invalidf("owner is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	}
	return apierr.ValidateText("owner", owner)
}

// ValidateID checks a lease ID: present, at most 64 bytes of printable
// UTF-8.
func ValidateID(id string) error {
	if id == "" {
		return apierr.Invalidf("leaseId is required")
	}
	if len(id) > maxIDBytes {
		return apierr.Invalidf("leaseId is %d bytes, the limit is %d", len(id), maxIDBytes)
	}
	return apierr.ValidateText("leaseId", id)
}
