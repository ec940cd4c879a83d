package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/internal/decimal"
)

// Header names of the pinned fencing wire contract. HTTP header
// names are case-insensitive, so gRPC metadata keys "fencing-scope" and
// "fencing-token" are the same headers.
const (
	HeaderScope = "Fencing-Scope"
	HeaderToken = "Fencing-Token"
	// HeaderSignature carries the signature of a signed token (see
	// fence.NewSignedGuard); guards without a verifier ignore it.
	HeaderSignature = "Fencing-Token-Signature"
	// HeaderOwner carries the lease owner beside the token, for the
	// observers, logs and rejection reports of the resource. Optional and
	// informational: it never takes part in the fencing decision.
	HeaderOwner = "Fencing-Owner"
	// HeaderSequence carries the write's sequence under its token
	// (fence.WithSequence), 1 to fence.MaxSequence in decimal. Optional.
	HeaderSequence = "Fencing-Sequence"
)

// SequenceFromHeader returns the Fencing-Sequence of a request, 0 when
// absent. A value that is not canonical decimal (as in ParseToken), is 0,
// is above fence.MaxSequence or is given more than once matches
// fence.ErrInvalidSequence.
func SequenceFromHeader(h http.Header) (uint64, error) {
	v, err := single(h, HeaderSequence)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", fence.ErrInvalidSequence, err)
	}
	if v == "" {
		if len(h.Values(HeaderSequence)) != 0 {
			return 0, fmt.Errorf("%w: %s is empty", fence.ErrInvalidSequence, HeaderSequence)
		}
		return 0, nil
	}
	q, reason, ok := decimal.Parse(v)
	if !ok {
		return 0, fmt.Errorf("%w: %s %s", fence.ErrInvalidSequence, quote(v), reason)
	}
	if q == 0 || q > fence.MaxSequence {
		return 0, fmt.Errorf("%w: %s is not between 1 and %d", fence.ErrInvalidSequence, quote(v), uint64(fence.MaxSequence))
	}
	return q, nil
}

// OwnerFromHeader returns the Fencing-Owner of a request, or "" when it is
// absent, given more than once, or not a valid owner (fence.ValidOwner). A
// bad owner is dropped rather than refused: it is a label for diagnosis,
// and the write it came with is judged by its token alone.
func OwnerFromHeader(h http.Header) string {
	v := h.Values(HeaderOwner)
	if len(v) != 1 || !fence.ValidOwner(v[0]) {
		return ""
	}
	return v[0]
}

// ErrInvalidToken is matched (with errors.Is) by every rejection of a
// Fencing-Token value that is present but not a token: not canonical
// decimal, 0, or above the uint64 range. An absent or empty value matches
// fence.ErrNoToken instead, because the two get different answers (400 and
// 428).
var ErrInvalidToken = errors.New("invalid fencing token")

// ParseToken parses a Fencing-Token value: canonical decimal, a digit from
// 1 to 9 followed by ASCII digits, denoting a value from 1 to 2^64-1.
// Leading zeros, signs, whitespace, underscores and other bases are
// refused: the header is compared by machines, so each token has one
// spelling and there is no guessing. (An HTTP/1.1 server removes spaces and
// tabs around a field value before the handler sees it, RFC 9110 section
// 5.5; over HTTP/2 they reach ParseToken and are refused.)
//
// The empty string returns an error matching fence.ErrNoToken; anything
// else that is not a token returns an error matching ErrInvalidToken.
func ParseToken(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("%s: %w", HeaderToken, fence.ErrNoToken)
	}
	t, reason, ok := decimal.Parse(s)
	if !ok {
		return 0, fmt.Errorf("%w: %s %s", ErrInvalidToken, quote(s), reason)
	}
	if t == 0 {
		return 0, fmt.Errorf("%w: 0 is never issued", ErrInvalidToken)
	}
	return t, nil
}

// FromHeader reads and validates the fencing scope and token of a request.
// Errors match fence.ErrNoToken (no Fencing-Token, or an empty one),
// ErrInvalidToken or fence.ErrInvalidScope, checked in that order, so a
// request without any fencing headers is reported as missing its token. The
// scope must pass fence.ValidateScope, the rule of lease keys. A header
// given more than once is invalid: which value was meant is unknown.
//
// HTTP/1.1 strips leading and trailing spaces from header values, so a scope
// that starts or ends with a space cannot travel in Fencing-Scope; derive
// such scopes with Config.ScopeFunc instead.
func FromHeader(h http.Header) (scope string, token uint64, err error) {
	token, err = TokenFromHeader(h)
	if err != nil {
		return "", 0, err
	}
	scope, err = single(h, HeaderScope)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", fence.ErrInvalidScope, err)
	}
	if err := fence.ValidateScope(scope); err != nil {
		return "", 0, err
	}
	return scope, token, nil
}

// TokenFromHeader reads and parses the Fencing-Token header alone, for
// servers that derive the scope from something else (see Config.ScopeFunc).
func TokenFromHeader(h http.Header) (uint64, error) {
	v, err := single(h, HeaderToken)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return ParseToken(v)
}

// single returns the only value of header name, "" when absent.
func single(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("%s given %d times", name, len(vs))
	}
}

// quote keeps attacker-sized header values out of error messages and
// responses while leaving enough to recognise the mistake.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}
