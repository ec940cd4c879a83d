package fence

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxScopeBytes is the longest scope, in bytes: the longest lease key the
// lease service accepts, since a scope is a lease key.
const MaxScopeBytes = 512

// ValidateScope reports whether s is a valid scope, which is exactly a valid
// lease key of the wire contract: 1 to MaxScopeBytes bytes of valid UTF-8
// whose every character is graphic (unicode.IsGraphic: letters, marks,
// numbers, punctuation, symbols and spaces such as U+0020 and U+00A0). It
// returns nil or a *ScopeError, which matches ErrInvalidScope.
//
// The lease service, every guard in this module, the fencing header parser
// and the reference store apply this one rule, so a scope that one of them
// accepts the others accept too, and a scope for which no token can ever be
// issued is refused before anything is written.
//
// Refused beyond control characters (Cc, NUL included): format characters
// (Cf, such as U+200B ZERO WIDTH SPACE, U+200E LEFT-TO-RIGHT MARK, U+FEFF),
// line and paragraph separators (U+2028, U+2029), private-use and unassigned
// code points. Format characters are invisible, so two keys that print alike
// could name different scopes. Which code points are unassigned depends on
// the Unicode version of the Go release that built the program
// (unicode.Version); a character assigned in a later version is refused by a
// program built with an earlier one.
func ValidateScope(s string) error {
	if reason := scopeProblem(s); reason != "" {
		return &ScopeError{Reason: reason}
	}
	return nil
}

// ScopeError describes why a scope is invalid. It matches ErrInvalidScope.
type ScopeError struct {
	// Reason completes "the scope ...": "is empty", "is 513 bytes, the
	// limit is 512", "is not valid UTF-8", or "has the non-printable
	// character U+200B at byte 3". It never quotes the scope, which may be
	// long or hostile.
	Reason string
}

func (e *ScopeError) Error() string { return ErrInvalidScope.Error() + ": scope " + e.Reason }

// Is makes errors.Is(err, ErrInvalidScope) true.
func (e *ScopeError) Is(target error) bool { return target == ErrInvalidScope }

func scopeProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > MaxScopeBytes:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), MaxScopeBytes)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return "is not valid UTF-8"
			}
		}
		if !unicode.IsGraphic(r) {
			return fmt.Sprintf("has the non-printable character %U at byte %d", r, i)
		}
	}
	return ""
}
