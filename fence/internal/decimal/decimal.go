// Package decimal parses the decimal numbers of the fencing headers,
// tokens and sequences, in HTTP requests and in messages alike
// (docs/guard-spec.md, sections 4, 7 and 8).
package decimal

import "strconv"

// Parse parses s as a canonical decimal number: "0", or a digit from 1 to
// 9 followed by digits, at most 2^64-1. Signs, spaces, leading zeros and
// other bases are refused, so that each number has one spelling: what a
// guard reads, logs and reports is exactly what was sent. On failure ok is
// false and reason says why, to follow the quoted value in an error.
func Parse(s string) (n uint64, reason string, ok bool) {
	if s == "" {
		return 0, "is empty", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "is not a decimal number", false
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, "has a leading zero", false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Only a range error is possible after the digit check.
		return 0, "exceeds the uint64 range", false
	}
	return n, "", true
}
