//go:build !fenced_failpoints

package failpoint

import "github.com/hashicorp/raft"

// Compiled reports whether this build carries the failpoints.
const Compiled = false

// Enabled reports whether mutant n is switched on: never, in this build.
func Enabled(Name) bool { return false }

// WrapLogStore returns s: without the tag there is nothing to wrap.
func WrapLogStore(s raft.LogStore) raft.LogStore { return s }

// OneIn reports true about once in n calls; never, in this build.
func OneIn(int) bool { return false }
