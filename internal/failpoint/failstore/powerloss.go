//go:build fenced_failpoints

package failstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"sync"

	"github.com/hashicorp/raft-wal/types"

	"github.com/fencedio/fenced/internal/failpoint"
)

// Simulated power loss (failpoint.LoseUnsyncedEnvVar=1): a kill -9 keeps everything
// a process wrote, because the page cache outlives it, so a missing fsync
// never shows. Under this switch the process keeps what it has not made
// durable where a kill destroys it, in the manner of LazyFS:
//
//   - Raft log segment files (WrapVFS): writes since a file's last Sync are
//     held in the process's memory, and reads see them; Sync fsyncs the
//     file, then writes them to it, so that they are durable when Sync
//     returns and not before. A kill loses what was held. A Close
//     writes them to the file without an fsync, as a clean exit leaves
//     them in the page cache.
//   - bbolt files (raft-wal's metadata through WrapMetaStore, the
//     reference store through DurableImage): bbolt writes through its own
//     file handle and reads through mmap, so its writes cannot be held
//     back. Instead a copy of the file, its durable image, is taken at
//     each durability point (a commit, which bbolt fsyncs before it
//     returns), and RestoreDurable puts the file back to that image before
//     the next open: what was written after the last durability point is
//     lost.
//
// Not modelled: torn or reordered writes within a file, the loss of
// directory entries (a created, renamed or deleted file whose directory
// was not fsynced), and every other file (raft snapshots, LOCK). A bbolt
// commit counts as fsynced; this trusts bbolt and its NoSync setting.

// loseUnsynced is failpoint.LosesUnsynced(); tests set it.
var loseUnsynced = failpoint.LosesUnsynced()

// WrapVFS returns the raft log's file system: v, or one that holds unsynced
// writes in memory (failpoint.LoseUnsyncedEnvVar), or with failpoint.LogSkipFsync switched on,
// one whose files are never synced.
func WrapVFS(v types.VFS) types.VFS {
	if loseUnsynced {
		v = &lazyVFS{VFS: v, files: map[string]*unsynced{}}
	}
	if enabled(failpoint.LogSkipFsync) {
		v = skipSyncVFS{v}
	}
	return v
}

// skipSyncVFS is the LogSkipFsync mutant.
type skipSyncVFS struct{ types.VFS }

type skipSyncFile struct{ types.WritableFile }

func (skipSyncFile) Sync() error { return nil }

func (v skipSyncVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return skipSyncFile{f}, nil
}

func (v skipSyncVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return skipSyncFile{f}, nil
}

// lazyVFS holds every file's unsynced writes, by path, so that a reader
// opened on a file sees what a writer of the same file has not synced.
type lazyVFS struct {
	types.VFS
	mu    sync.Mutex
	files map[string]*unsynced
}

func (v *lazyVFS) pending(dir, name string, fresh bool) *unsynced {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := dir + string(os.PathSeparator) + name
	u := v.files[p]
	if u == nil || fresh {
		u = &unsynced{}
		v.files[p] = u
	}
	return u
}

func (v *lazyVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &lazyFile{WritableFile: f, u: v.pending(dir, name, true)}, nil
}

func (v *lazyVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &lazyFile{WritableFile: f, u: v.pending(dir, name, false)}, nil
}

func (v *lazyVFS) OpenReader(dir, name string) (types.ReadableFile, error) {
	f, err := v.VFS.OpenReader(dir, name)
	if err != nil {
		return nil, err
	}
	return &lazyReader{ReadableFile: f, u: v.pending(dir, name, false)}, nil
}

func (v *lazyVFS) Delete(dir, name string) error {
	v.mu.Lock()
	delete(v.files, dir+string(os.PathSeparator)+name)
	v.mu.Unlock()
	return v.VFS.Delete(dir, name)
}

// unsynced is the writes to one file since its last Sync, in order.
type unsynced struct {
	mu     sync.Mutex
	writes []pendingWrite
}

type pendingWrite struct {
	off int64
	b   []byte
}

func (u *unsynced) add(p []byte, off int64) {
	u.mu.Lock()
	u.writes = append(u.writes, pendingWrite{off: off, b: append([]byte(nil), p...)})
	u.mu.Unlock()
}

// read completes a ReadAt of the file, which returned n and err, with the
// unsynced writes: a write past the file's end extends what is read, and
// the bytes between the end and it read as zeros.
func (u *unsynced) read(p []byte, off int64, n int, err error) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, w := range u.writes {
		lo, hi := max(off, w.off), min(off+int64(len(p)), w.off+int64(len(w.b)))
		if lo >= hi {
			continue
		}
		if int(lo-off) > n {
			clear(p[n : lo-off])
		}
		copy(p[lo-off:hi-off], w.b[lo-w.off:hi-w.off])
		n = max(n, int(hi-off))
	}
	if n == len(p) && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// flush writes the unsynced writes to f, in order.
func (u *unsynced) flush(f io.WriterAt) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, w := range u.writes {
		if _, err := f.WriteAt(w.b, w.off); err != nil {
			u.writes = u.writes[i:]
			return err
		}
	}
	u.writes = nil
	return nil
}

type lazyFile struct {
	types.WritableFile
	u *unsynced
}

func (f *lazyFile) WriteAt(p []byte, off int64) (int, error) {
	f.u.add(p, off)
	return len(p), nil
}

func (f *lazyFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.WritableFile.ReadAt(p, off)
	return f.u.read(p, off, n, err)
}

// Sync makes what was held durable when it returns, not before: a real
// power loss during an fsync loses what it was syncing. So the fsync comes
// first, and takes its usual time, and only then is what was held written
// to the file, where a kill -9 no longer loses it.
func (f *lazyFile) Sync() error {
	if err := f.WritableFile.Sync(); err != nil {
		return err
	}
	return f.u.flush(f.WritableFile)
}

func (f *lazyFile) Close() error {
	return errors.Join(f.u.flush(f.WritableFile), f.WritableFile.Close())
}

type lazyReader struct {
	types.ReadableFile
	u *unsynced
}

func (r *lazyReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.ReadableFile.ReadAt(p, off)
	return r.u.read(p, off, n, err)
}

// WrapMetaStore returns raft-wal's metadata store m, whose bbolt file is
// path, or with failpoint.LoseUnsyncedEnvVar, one that takes the file's durable
// image after every commit.
func WrapMetaStore(m types.MetaStore, path string) types.MetaStore {
	if !loseUnsynced {
		return m
	}
	return &imagedMeta{MetaStore: m, img: &DurableImage{Path: path}}
}

// imagedMeta serializes commits with the images of them, so that no
// commit is under way while the file is copied.
type imagedMeta struct {
	types.MetaStore
	mu  sync.Mutex
	img *DurableImage
}

func (m *imagedMeta) Load(dir string) (types.PersistentState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := m.MetaStore.Load(dir)
	if err != nil {
		return st, err
	}
	return st, m.img.Mark()
}

func (m *imagedMeta) CommitState(s types.PersistentState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.MetaStore.CommitState(s); err != nil {
		return err
	}
	return m.img.Mark()
}

func (m *imagedMeta) SetStable(k, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.MetaStore.SetStable(k, v); err != nil {
		return err
	}
	return m.img.Mark()
}

// imageSuffix names a file's durable image, next to it.
const imageSuffix = ".durable"

// DurableImage keeps the durable image of the bbolt file Path. Mark must
// not run while a commit to the file is under way.
type DurableImage struct {
	Path   string
	f      *os.File
	shadow []byte // the image's contents
}

// Mark records the file as it is now as its durable image. It writes the
// pages that changed since the last Mark, bbolt's two meta pages last: a
// kill in the middle leaves the image at the previous commit, because a
// bbolt commit never overwrites a page the previous meta page reaches.
func (im *DurableImage) Mark() error {
	cur, err := os.ReadFile(im.Path)
	if err != nil {
		return err
	}
	if im.f == nil {
		f, err := os.OpenFile(im.Path+imageSuffix, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if im.shadow, err = io.ReadAll(f); err != nil {
			f.Close()
			return err
		}
		im.f = f
	}
	if len(cur) > len(im.shadow) {
		if err := im.f.Truncate(int64(len(cur))); err != nil {
			return err
		}
	}
	page := os.Getpagesize()
	metaEnd := min(2*page, len(cur))
	for _, r := range [][2]int{{metaEnd, len(cur)}, {0, metaEnd}} {
		for lo := r[0]; lo < r[1]; lo += page {
			hi := min(lo+page, r[1])
			if hi <= len(im.shadow) && bytes.Equal(cur[lo:hi], im.shadow[lo:hi]) {
				continue
			}
			if _, err := im.f.WriteAt(cur[lo:hi], int64(lo)); err != nil {
				return err
			}
		}
	}
	if len(cur) < len(im.shadow) {
		if err := im.f.Truncate(int64(len(cur))); err != nil {
			return err
		}
	}
	im.shadow = cur
	return nil
}

// Close closes the image file.
func (im *DurableImage) Close() error {
	if im.f == nil {
		return nil
	}
	return im.f.Close()
}

// RestoreDurable puts the bbolt file path back to its durable image, if it
// has one, and reports whether it changed it: the simulated power loss of
// the process that wrote it last. With failpoint.LoseUnsyncedEnvVar off it does
// nothing. Call it before the file is opened.
func RestoreDurable(path string) (bool, error) {
	if !loseUnsynced {
		return false, nil
	}
	img, err := os.ReadFile(path + imageSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if bytes.Equal(cur, img) {
		return false, nil
	}
	return true, os.WriteFile(path, img, 0o600)
}

// WrapStoreHandler returns the reference store's HTTP handler h, whose
// bbolt file is path, or with failpoint.LoseUnsyncedEnvVar, one that serializes the
// requests that may write and takes the file's durable image after each,
// before its answer leaves: the store commits (and bbolt fsyncs) inside
// the request, so the end of a write request is a durability point. The
// image is taken once at once. Close the returned image when done.
func WrapStoreHandler(h http.Handler, path string) (http.Handler, io.Closer, error) {
	img := &DurableImage{Path: path}
	if !loseUnsynced {
		return h, img, nil
	}
	if err := img.Mark(); err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		h.ServeHTTP(w, r)
		if err := img.Mark(); err != nil {
			// The image no longer matches what was acknowledged.
			fmt.Fprintf(os.Stderr, "failpoint: durable image of %s: %v\n", path, err)
			os.Exit(70)
		}
	}), img, nil
}
