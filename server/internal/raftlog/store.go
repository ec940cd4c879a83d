package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencedio/fenced/internal/failpoint/failstore"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	bolt "go.etcd.io/bbolt"
)

// The data directory:
//
//	LOCK                 flock held while a fenced process uses the directory
//	wal/                 the raft log and stable store (hashicorp/raft-wal)
//	  wal-meta.db        term, vote and the list of segments (bbolt)
//	  <index>-<id>.wal   log segments, each preallocated to walSegmentSize
//	snapshots/           raft file snapshots of the lease state
//	raft.db.migrated     the bbolt log of an earlier version, once migrated
const (
	lockFileName    = "LOCK"
	WALDirName      = "wal"
	BoltLogFileName = "raft.db"
	MigratedSuffix  = ".migrated"
	// MigratingSuffix names the directory a migration writes before it is
	// renamed to WALDirName, so that a crash never leaves half a log there.
	MigratingSuffix = ".migrating"
	// walSegmentSize is smaller than raft-wal's 64 MiB default: the log
	// between two snapshots is a few MB, and segments are only freed whole
	// once a snapshot lets raft truncate the log head.
	walSegmentSize = 8 << 20
)

// Stable-store keys that hashicorp/raft writes; the migration copies them.
var raftStableKeys = []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"}

// closedAtKey holds the last log index when the node last shut down
// cleanly, and 0 while it runs. A log that ends before it on the next start
// lost acknowledged entries: nothing was written after the shutdown, so no
// crash can have torn them.
var closedAtKey = []byte("FencedClosedAtIndex")

var (
	// ErrDataDirInUse means another process holds the data directory's LOCK.
	ErrDataDirInUse = errors.New("in use by another fenced process")
	// ErrCorruptLog means the raft log on disk is damaged before its last
	// write: entries that may have been acknowledged are unreadable, so the
	// node refuses to start rather than serve without them.
	ErrCorruptLog = errors.New("raft log is corrupt")
	// ErrLogWrite means a write or fsync of the raft log failed. The node
	// stops: after a failed fsync the file's contents are unknown, and
	// retrying could acknowledge entries that are not on disk.
	ErrLogWrite = errors.New("raft log write failed")
)

// CorruptLogError locates damage in the raft log.
type CorruptLogError struct {
	Segment string // path of the segment file
	Offset  int64  // where the damage starts
	Reason  string
}

func (e *CorruptLogError) Error() string {
	return fmt.Sprintf("%v: %s at offset %d: %s; entries written after the damage may have been acknowledged, "+
		"so fenced will not start on this log. A single node: restore the data directory from a backup. "+
		"In a cluster, bring this member back as a new one, which copies the log from the leader: "+
		"fencectl member remove ID; empty this data directory; start fenced with --join (and no --initial-cluster); "+
		"fencectl member add ID RAFTHOST:PORT",
		ErrCorruptLog, e.Segment, e.Offset, e.Reason)
}

func (e *CorruptLogError) Is(target error) bool { return target == ErrCorruptLog }

// Store is the raft log and stable store of a data directory, and the
// lock that keeps other processes out of it.
type Store struct {
	*wal.WAL
	meta   *metadb.BoltMetaDB
	unlock func() error
}

// Open locks dir, migrates a bbolt log of an earlier version into
// the WAL if there is one, checks the WAL for damage and opens it.
func Open(dir string, hlog hclog.Logger) (_ *Store, err error) {
	unlock, err := lockDir(filepath.Join(dir, lockFileName))
	if err != nil {
		if errors.Is(err, ErrDataDirInUse) {
			return nil, fmt.Errorf("data dir %s is %w", dir, err)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	if err := migrateBolt(dir, hlog); err != nil {
		return nil, err
	}
	walDir := filepath.Join(dir, WALDirName)
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if lost, err := failstore.RestoreDurable(filepath.Join(walDir, metadb.FileName)); err != nil {
		return nil, fmt.Errorf("simulated power loss: %w", err)
	} else if lost {
		hlog.Warn("simulated power loss: the raft log metadata is back at its last commit")
	}
	if err := checkWAL(walDir); err != nil {
		return nil, err
	}
	w, meta, err := OpenWAL(walDir, hlog)
	if err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	d := &Store{WAL: w, meta: meta, unlock: func() error { return nil }}
	if err := d.checkClosedAt(walDir); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	d.unlock = unlock
	return d, nil
}

// checkClosedAt compares the log with the index recorded at the last clean
// shutdown, then clears it: from now on, a crash may tear the last append.
func (d *Store) checkClosedAt(walDir string) error {
	closedAt, err := d.GetUint64(closedAtKey)
	if err != nil {
		return fmt.Errorf("read raft log metadata: %w", err)
	}
	if closedAt == 0 {
		return nil
	}
	last, err := d.LastIndex()
	if err != nil {
		return fmt.Errorf("read raft log: %w", err)
	}
	if last < closedAt {
		return &CorruptLogError{Segment: walDir, Reason: fmt.Sprintf(
			"the log ends at index %d, but the node shut down cleanly at index %d: the last append was damaged after it was written",
			last, closedAt)}
	}
	if err := d.SetUint64(closedAtKey, 0); err != nil {
		return fmt.Errorf("write raft log metadata: %w", err)
	}
	return nil
}

// MarkClosed records the log's last index for checkClosedAt. Call it only
// once raft has stopped, after a shutdown with no failed write.
func (d *Store) MarkClosed() error {
	last, err := d.LastIndex()
	if err != nil {
		return err
	}
	return d.SetUint64(closedAtKey, last)
}

// OpenWAL opens the WAL with a metadata store of our own, which the
// failpoint build may wrap, with the segment files, to simulate power
// losses. The WAL's Close closes the store too; closing it again is a no-op.
func OpenWAL(dir string, hlog hclog.Logger) (*wal.WAL, *metadb.BoltMetaDB, error) {
	meta := new(metadb.BoltMetaDB)
	w, err := wal.Open(dir, wal.WithLogger(hlog.Named("wal")), wal.WithSegmentSize(walSegmentSize),
		wal.WithMetaStore(failstore.WrapMetaStore(meta, filepath.Join(dir, metadb.FileName))),
		wal.WithSegmentFiler(segment.NewFiler(dir, failstore.WrapVFS(walfs.New()))))
	if err != nil {
		return nil, nil, errors.Join(err, meta.Close())
	}
	return w, meta, nil
}

// Close closes the WAL, which waits for a write in progress, then its
// metadata and the lock.
func (d *Store) Close() error {
	return errors.Join(d.WAL.Close(), d.meta.Close(), d.unlock())
}

// migrateBolt copies the raft log, term and vote of a bbolt raft.db (the
// store of earlier versions) into a new WAL, then renames raft.db to
// raft.db.migrated. It writes the WAL under another name and renames it into
// place, so a crash at any point leaves either the old store alone or a
// complete WAL.
func migrateBolt(dir string, hlog hclog.Logger) error {
	old := filepath.Join(dir, BoltLogFileName)
	if _, err := os.Stat(old); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	walDir := filepath.Join(dir, WALDirName)
	if _, err := os.Stat(walDir); err == nil {
		// A migration renamed the WAL into place and crashed before it
		// retired raft.db: the WAL is complete.
		return retireBolt(dir, old, hlog)
	}
	tmp := walDir + MigratingSuffix
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	n, err := copyBolt(old, tmp, hlog)
	if err != nil {
		return fmt.Errorf("migrate %s to %s: %w (the old store is untouched; to start over without it, move it away)", old, walDir, err)
	}
	if err := SyncDir(tmp); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	if err := os.Rename(tmp, walDir); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	hlog.Info("migrated the bbolt raft log to the WAL", "entries", n, "from", old, "to", walDir)
	return retireBolt(dir, old, hlog)
}

func retireBolt(dir, old string, hlog hclog.Logger) error {
	if err := os.Rename(old, old+MigratedSuffix); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("migrate %s: %w", old, err)
	}
	hlog.Info("old raft log kept; delete it once the node runs well", "path", old+MigratedSuffix)
	return nil
}

// copyBolt copies every entry and the raft stable keys of the bbolt store at
// path into a new WAL in walDir, and returns the number of entries.
func copyBolt(path, walDir string, hlog hclog.Logger) (int, error) {
	src, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true},
	})
	if err != nil {
		return 0, fmt.Errorf("open: %w", err)
	}
	defer src.Close()
	dst, meta, err := OpenWAL(walDir, hlog)
	if err != nil {
		return 0, err
	}
	n, err := copyLogs(dst, src)
	if err == nil {
		err = copyStable(dst, src)
	}
	return n, errors.Join(err, dst.Close(), meta.Close())
}

func copyLogs(dst, src raft.LogStore) (int, error) {
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil || last == 0 {
		return 0, err
	}
	const batch = 1024
	logs := make([]*raft.Log, 0, batch)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return 0, fmt.Errorf("read entry %d: %w", i, err)
		}
		logs = append(logs, l)
		if len(logs) == batch || i == last {
			if err := dst.StoreLogs(logs); err != nil {
				return 0, fmt.Errorf("write entries up to %d: %w", i, err)
			}
			logs = logs[:0]
		}
	}
	return int(last - first + 1), nil
}

func copyStable(dst, src raft.StableStore) error {
	for _, k := range raftStableKeys {
		v, err := src.Get([]byte(k))
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if err := dst.Set([]byte(k), v); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
	}
	return nil
}

func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// The raft-wal segment format (see its README): a 32-byte file header, then
// 8-byte-aligned frames with an 8-byte header: a type byte, three reserved
// zero bytes and a little-endian uint32, the payload length of an entry or
// index frame, or for a commit frame the CRC-32C of every byte since the
// previous commit frame (or the file's start). Each append writes its
// entries and a commit frame, then fsyncs.
const (
	segHeaderLen   = 32
	frameHeaderLen = 8
	frameEntry     = 1
	frameIndex     = 2
	frameCommit    = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentScan is what a walk through one segment file found.
type segmentScan struct {
	// entries holds the offset of every entry frame in a batch whose commit
	// frame checksum matched.
	entries []int64
	// end is the offset just after the last valid commit frame.
	end int64
	// stop is where the walk stopped, and why. A clean log stops at
	// zeros (preallocated space) or the end of the file.
	stop   int64
	reason string
	// sealed: an index frame was committed.
	sealed bool
}

const stopClean = "end of data"

// scanSegment walks the frames of a segment file, checking every batch's
// checksum (raft-wal itself checks only the last batch's).
func scanSegment(b []byte) segmentScan {
	s := segmentScan{end: -1, reason: stopClean}
	var pending []int64
	var pendingIndex bool
	crcStart := int64(0)
	off := int64(segHeaderLen)
	for {
		s.stop = off
		if off+frameHeaderLen > int64(len(b)) {
			if off < int64(len(b)) && !allZero(b[off:]) {
				s.reason = "truncated frame header"
			}
			return s
		}
		h := b[off : off+frameHeaderLen]
		if h[0] != 0 && (h[1] != 0 || h[2] != 0 || h[3] != 0) {
			s.reason = "bad frame header"
			return s
		}
		switch h[0] {
		case 0:
			if !allZero(h) {
				s.reason = "bad frame header"
			}
			return s
		case frameEntry, frameIndex:
			n := int64(binary.LittleEndian.Uint32(h[4:]))
			next := off + frameHeaderLen + (n+7)&^7
			if next > int64(len(b)) {
				s.reason = "frame runs past the end of the file"
				return s
			}
			if h[0] == frameEntry {
				pending = append(pending, off)
			} else {
				pendingIndex = true
			}
			off = next
		case frameCommit:
			if crc32.Checksum(b[crcStart:off], castagnoli) != binary.LittleEndian.Uint32(h[4:]) {
				s.reason = "batch checksum mismatch"
				return s
			}
			s.entries = append(s.entries, pending...)
			s.sealed = s.sealed || pendingIndex
			pending, pendingIndex = pending[:0], false
			off += frameHeaderLen
			s.end, crcStart = off, off
		default:
			s.reason = "bad frame type"
			return s
		}
	}
}

// CommittedFrames returns the offsets of the entry frames of a segment
// file whose batches' checksums match, and the offset just past the last
// matching commit frame. Tests that damage a log aim with it.
func CommittedFrames(b []byte) (entries []int64, end int64) {
	s := scanSegment(b)
	return s.entries, s.end
}

// FrameHeaderLen is the length of a frame's header in a segment file.
const FrameHeaderLen = frameHeaderLen

// committedAfter looks past the point where a walk stopped for a batch that
// was written and fsynced after the damage: a commit frame whose checksum
// matches the bytes since a plausible batch start. A write torn by a crash
// cannot be followed by one, because raft-wal writes the next batch only
// once the fsync of the last has returned.
func committedAfter(b []byte, s segmentScan) (int64, bool) {
	start := s.end
	if start < 0 {
		start = segHeaderLen
	}
	// Plausible starts of a batch: after the last good commit, after the
	// frame header the walk could not read (a damaged commit frame), and
	// after every later commit-like frame header.
	starts := []int64{start}
	if s.stop > start && s.reason != stopClean {
		starts = append(starts, s.stop+frameHeaderLen)
	}
	for c := start; c+frameHeaderLen <= int64(len(b)); c += frameHeaderLen {
		h := b[c : c+frameHeaderLen]
		if h[0] != frameCommit || h[1] != 0 || h[2] != 0 || h[3] != 0 {
			continue
		}
		want := binary.LittleEndian.Uint32(h[4:])
		// The nearest few starts before c; a batch holds at least one
		// entry frame, so the start is at least one frame before c.
		tried := 0
		for i := len(starts) - 1; i >= 0 && tried < 3; i-- {
			st := starts[i]
			if st+frameHeaderLen > c {
				continue
			}
			tried++
			if crc32.Checksum(b[st:c], castagnoli) == want {
				return c, true
			}
		}
		starts = append(starts, c+frameHeaderLen)
	}
	return 0, false
}

func allZero(b []byte) bool {
	return len(bytes.Trim(b, "\x00")) == 0
}

// checkWAL reads every segment of the WAL in walDir and fails with a
// CorruptLogError if any is damaged anywhere but in the last batch of the
// last segment. raft-wal on its own treats damage anywhere in the last
// segment as a torn final write and silently drops everything after it.
func checkWAL(walDir string) error {
	if _, err := os.Stat(filepath.Join(walDir, metadb.FileName)); errors.Is(err, fs.ErrNotExist) {
		return nil // a new log
	}
	var meta metadb.BoltMetaDB
	st, err := meta.Load(walDir)
	if cerr := meta.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read raft log metadata: %w", err)
	}
	for i, info := range st.Segments {
		path := filepath.Join(walDir, segment.FileName(info))
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && i == len(st.Segments)-1 && info.SealTime.IsZero() {
			// raft-wal creates a new tail before it writes to it; a crash in
			// between leaves none, and it recreates it.
			continue
		}
		if err != nil {
			return fmt.Errorf("read raft log: %w", err)
		}
		s := scanSegment(b)
		switch {
		case !info.SealTime.IsZero() && info.IndexStart != 0:
			// Sealed when full: every batch up to the index frame must be
			// intact. (After a crash recovery, stale bytes of a torn write
			// may follow the last commit; they are never read.)
			if !s.sealed {
				return &CorruptLogError{Segment: path, Offset: s.stop, Reason: s.reason + " before the segment's index frame"}
			}
		case !info.SealTime.IsZero():
			// Sealed by a truncation of the log's tail at MaxIndex.
			if info.BaseIndex+uint64(len(s.entries)) <= info.MaxIndex {
				return &CorruptLogError{Segment: path, Offset: s.stop,
					Reason: fmt.Sprintf("%s after %d entries; the segment holds entries up to %d", s.reason, len(s.entries), info.MaxIndex)}
			}
		default:
			// The tail: only its last batch may be damaged, by a crash
			// during the write that was never acknowledged.
			if c, ok := committedAfter(b, s); ok {
				return &CorruptLogError{Segment: path, Offset: s.stop,
					Reason: fmt.Sprintf("%s, followed by a committed batch at offset %d", s.reason, c)}
			}
		}
		if i+1 < len(st.Segments) && info.BaseIndex+uint64(len(s.entries)) < st.Segments[i+1].BaseIndex {
			return &CorruptLogError{Segment: path, Offset: s.stop,
				Reason: fmt.Sprintf("%s after %d entries from %d, but the next segment starts at %d",
					s.reason, len(s.entries), info.BaseIndex, st.Segments[i+1].BaseIndex)}
		}
	}
	return nil
}

// FailStop stops every later write once one write or fsync of the
// log has failed, and reports the failure once. hashicorp/raft would step
// down and, on winning the next election, append again to a file whose
// state after a failed fsync is unknown.
type FailStop struct {
	raft.LogStore
	OnFail func(error)
	mu     sync.Mutex
	err    error
}

func (s *FailStop) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *FailStop) StoreLogs(logs []*raft.Log) error {
	if err := s.failed(); err != nil {
		return err
	}
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return s.fail(fmt.Errorf("%w: append of %d entries from index %d: %w", ErrLogWrite, len(logs), logs[0].Index, err))
	}
	return nil
}

func (s *FailStop) DeleteRange(lo, hi uint64) error {
	if err := s.failed(); err != nil {
		return err
	}
	if err := s.LogStore.DeleteRange(lo, hi); err != nil {
		return s.fail(fmt.Errorf("%w: delete of entries %d to %d: %w", ErrLogWrite, lo, hi, err))
	}
	return nil
}

func (s *FailStop) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *FailStop) fail(err error) error {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	err = s.err
	s.mu.Unlock()
	if first && s.OnFail != nil {
		s.OnFail(err)
	}
	return err
}
