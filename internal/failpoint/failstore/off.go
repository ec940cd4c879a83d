//go:build !fenced_failpoints

package failstore

import (
	"io"
	"net/http"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/types"
)

// WrapLogStore returns s: without the tag there is nothing to wrap.
func WrapLogStore(s raft.LogStore) raft.LogStore { return s }

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

// WrapAckHandler returns h: without the tag there is nothing to wrap.
func WrapAckHandler(h http.Handler) http.Handler { return h }
