//go:build !fenced_failpoints

package failpoint

import (
	"io"
	"net/http"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/types"
)

// Compiled reports whether this build carries the failpoints.
const Compiled = false

// Enabled reports whether mutant n is switched on: never, in this build.
func Enabled(Name) bool { return false }

// WrapLogStore returns s: without the tag there is nothing to wrap.
func WrapLogStore(s raft.LogStore) raft.LogStore { return s }

// OneIn reports true about once in n calls; never, in this build.
func OneIn(int) bool { return false }

// LosesUnsynced reports whether crashes are simulated power losses: never,
// in this build.
func LosesUnsynced() bool { return false }

// WrapVFS returns v: without the tag there is nothing to wrap.
func WrapVFS(v types.VFS) types.VFS { return v }

// WrapMetaStore returns m: without the tag there is nothing to wrap.
func WrapMetaStore(m types.MetaStore, _ string) types.MetaStore { return m }

// RestoreDurable does nothing without the tag.
func RestoreDurable(string) (bool, error) { return false, nil }

// WrapStoreHandler returns h: without the tag there is nothing to wrap.
func WrapStoreHandler(h http.Handler, _ string) (http.Handler, io.Closer, error) {
	return h, io.NopCloser(nil), nil
}
