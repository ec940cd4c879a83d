// Package scopetest holds the edge cases of the scope rule
// (fence.ValidateScope), shared by the tests of every place that applies it:
// the lease service's key check, each guard, the fencing header parser and
// the reference store. One table keeps them from drifting apart again.
package scopetest

import "strings"

// Case is one scope and whether the rule accepts it.
type Case struct {
	Name  string
	Scope string
	Valid bool
}

// Cases are the edge cases of the rule. Valid scopes are distinct from each
// other, so a test may use each as a fresh scope.
var Cases = []Case{
	{"empty", "", false},
	{"one byte", "k", true},
	{"path-like", "orders/7/../x.y", true},
	{"inner space", "a b", true},
	{"no-break space", "a\u00a0b", true},
	{"ideographic", "鍵/ロック", true},
	{"emoji", "lock-\U0001F512", true},
	{"combining mark", "e\u0301", true},
	{"encoded U+FFFD", "a\ufffdb", true},
	{"512 bytes", strings.Repeat("k", 512), true},
	{"512 bytes of 2-byte characters", strings.Repeat("é", 256), true},
	{"513 bytes", strings.Repeat("k", 513), false},
	{"513 bytes ending in a 2-byte character", strings.Repeat("k", 511) + "é", false},
	{"1 MiB", strings.Repeat("k", 1<<20), false},
	{"NUL", "a\x00b", false},
	{"only NUL", "\x00", false},
	{"BEL", "a\x07b", false},
	{"newline", "a\nb", false},
	{"tab", "a\tb", false},
	{"DEL", "a\x7fb", false},
	{"C1 control U+0085", "a\u0085b", false},
	{"format U+200B zero width space", "a\u200bb", false},
	{"format U+200E left-to-right mark", "a\u200eb", false},
	{"format U+FEFF byte order mark", "\ufeffab", false},
	{"format U+00AD soft hyphen", "a\u00adb", false},
	{"line separator U+2028", "a\u2028b", false},
	{"private use U+E000", "a\ue000b", false},
	{"invalid UTF-8 byte", "a\xffb", false},
	{"truncated UTF-8", "ab\xc3", false},
	{"UTF-8 encoded surrogate", "a\xed\xa0\x80b", false},
	{"overlong UTF-8", "a\xc0\xafb", false},
}

// Valid returns the cases the rule accepts.
func Valid() []Case { return filter(true) }

// Invalid returns the cases the rule refuses.
func Invalid() []Case { return filter(false) }

func filter(valid bool) []Case {
	var out []Case
	for _, c := range Cases {
		if c.Valid == valid {
			out = append(out, c)
		}
	}
	return out
}
