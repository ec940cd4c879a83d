package fenceredis

import (
	"errors"
	"fmt"
	"strings"
)

// ErrKeyOutsideScope is matched (with errors.Is) by the error a mutation
// returns when one of its keys does not carry the scope's hash tag, or is the
// scope's highest-token key itself. Nothing is sent to Redis in that case.
var ErrKeyOutsideScope = errors.New("key outside the fencing scope")

// tagEscaper makes any scope usable as a Redis hash tag. Redis ends a tag at
// the first '}', so a '}' inside a scope would cut it short; '{' and '%' are
// escaped as well so that the mapping stays one-to-one ("a}b" and "a%7Db"
// must not share a tag) and tags never contain braces at all.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// HashTag returns the text that goes between '{' and '}' in every key of
// scope: the scope itself, with '%', '{' and '}' percent-encoded (as %25,
// %7B and %7D). Scopes without those characters are their own hash tag.
//
// Key builds keys with it; use HashTag directly only when a key must be
// spelled differently.
func HashTag(scope string) string {
	if !strings.ContainsAny(scope, "%{}") {
		return scope
	}
	return tagEscaper.Replace(scope)
}

// Key returns name + "{" + HashTag(scope) + "}", a key that a Guard accepts
// in mutations of scope and that Redis Cluster stores in the same hash slot
// as the scope's highest token.
//
// name must not contain '{': Redis takes the hash tag from the first '{' of
// a key, so a brace in name would move the key to another slot. Mutations
// refuse such keys with ErrKeyOutsideScope.
func Key(scope, name string) string {
	return name + "{" + HashTag(scope) + "}"
}

// hashTag returns the part of key that Redis Cluster hashes to pick a slot:
// the text between the first '{' and the first '}' after it, if that text is
// not empty. ok is false when Redis would hash the whole key instead.
func hashTag(key string) (tag string, ok bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 { // no '}', or "{}": Redis hashes the whole key
		return "", false
	}
	return key[open+1 : open+1+n], true
}

// checkKeys refuses keys that do not belong to scope's hash slot, and the
// token and sequence keys, which only the guard may write.
func checkKeys(scope, tag, tokenKey, seqKey string, keys []string) error {
	for _, k := range keys {
		if k == tokenKey {
			return fmt.Errorf("key %q is the highest-token key of scope %q: %w", k, scope, ErrKeyOutsideScope)
		}
		if k == seqKey {
			return fmt.Errorf("key %q is the sequence key of scope %q: %w", k, scope, ErrKeyOutsideScope)
		}
		got, ok := hashTag(k)
		if !ok {
			return fmt.Errorf("key %q has no hash tag, want {%s} for scope %q (build keys with Key): %w",
				k, tag, scope, ErrKeyOutsideScope)
		}
		if got != tag {
			return fmt.Errorf("key %q has hash tag {%s}, want {%s} for scope %q (build keys with Key): %w",
				k, got, tag, scope, ErrKeyOutsideScope)
		}
	}
	return nil
}
