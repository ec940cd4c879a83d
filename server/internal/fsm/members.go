package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// Members' client URLs: the state machine holds the client URL each member
// advertises (the node's clienturls.go writes them), set and forgotten by
// log entries of their own, and kept in snapshots ahead of the leases.

// memberEntryTag starts a log entry that sets a member's client URL. It is
// not a version byte of lease.Command, so the two cannot be mistaken.
const memberEntryTag = 0xF0

// EncodeMemberEntry is the log entry that sets id's client URL, or forgets
// it when url is empty.
func EncodeMemberEntry(id, url string) []byte {
	b := []byte{memberEntryTag}
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	b = binary.AppendUvarint(b, uint64(len(url)))
	return append(b, url...)
}

func decodeMemberEntry(b []byte) (id, url string, err error) {
	r := bytes.NewReader(b[1:])
	if id, err = readString(r); err == nil {
		url, err = readString(r)
	}
	if err == nil && r.Len() != 0 {
		err = errors.New("trailing bytes")
	}
	if err != nil {
		return "", "", fmt.Errorf("member entry: %w", err)
	}
	return id, url, nil
}

func readString(r io.ByteReader) (string, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", err
	}
	if n > 4096 {
		return "", fmt.Errorf("string of %d bytes", n)
	}
	b := make([]byte, n)
	for i := range b {
		if b[i], err = r.ReadByte(); err != nil {
			return "", io.ErrUnexpectedEOF
		}
	}
	return string(b), nil
}

// membersMagic starts a state machine snapshot that begins with the members'
// client URLs; the lease snapshot follows. A snapshot without it (from an
// older fenced, or a restored backup) is the lease snapshot alone.
var membersMagic = [8]byte{'f', 'e', 'n', 'c', 'e', 'd', 'm', 1}

func writeMembers(w io.Writer, urls map[string]string) error {
	b := append([]byte(nil), membersMagic[:]...)
	b = binary.AppendUvarint(b, uint64(len(urls)))
	for _, id := range slices.Sorted(maps.Keys(urls)) { // equal states, equal bytes
		u := urls[id]
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
		b = binary.AppendUvarint(b, uint64(len(u)))
		b = append(b, u...)
	}
	_, err := w.Write(b)
	return err
}

// readMembers reads the members' section, if r starts with one, and leaves
// r at the lease snapshot.
func readMembers(r *bufio.Reader) (map[string]string, error) {
	urls := map[string]string{}
	head, err := r.Peek(len(membersMagic))
	if err != nil || [8]byte(head) != membersMagic {
		return urls, nil // the lease snapshot alone; it reports its own errors
	}
	r.Discard(len(membersMagic))
	n, err := binary.ReadUvarint(r)
	for i := uint64(0); i < n && err == nil; i++ {
		var id, u string
		if id, err = readString(r); err == nil {
			u, err = readString(r)
			urls[id] = u
		}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: members' client URLs: %w", err)
	}
	return urls, nil
}

// ClientURLs returns a copy of the members' client URLs the state machine
// holds.
func (f *FSM) ClientURLs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.members)
}
