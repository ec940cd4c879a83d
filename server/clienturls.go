package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Client URLs. Every member advertises the base URL clients reach its API
// at (Config.AdvertiseClientURL, fenced --advertise-client-url). The leader
// asks each member of the configuration for it (GET /v1/role on the member's
// peer port) and writes the ones that changed to the log, so that every
// node's state machine holds every member's URL, a stopped member's too:
// ListMembers and /v1/role show them, and clients sync their endpoints from
// them (client.Config.AutoSyncInterval). A member's URL is forgotten once it
// leaves the configuration.
//
// Not guaranteed: a URL is what its member said, not checked to answer;
// a member whose URL changed is listed with its old one until the leader
// next asks it (clientURLInterval).

// clientURLInterval is how often the leader asks the members for their
// client URLs.
const clientURLInterval = time.Second

// memberEntryTag starts a log entry that sets a member's client URL. It is
// not a version byte of lease.Command, so the two cannot be mistaken.
const memberEntryTag = 0xF0

// encodeMemberEntry is the log entry that sets id's client URL, or forgets
// it when url is empty.
func encodeMemberEntry(id, url string) []byte {
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

// ValidateClientURL checks a URL a member advertises to clients: http or
// https, a host, and no path, query or fragment (it is a base URL).
func ValidateClientURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("client URL %q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("client URL %q: the scheme must be http or https", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("client URL %q: no host", s)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("client URL %q: only scheme, host and port are allowed", s)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("client URL %q: clients cannot dial an unspecified address", s)
	}
	return nil
}

// clientURL is the URL this node advertises: Config.AdvertiseClientURL, or
// by default the address its API listens on, unless that is every address
// of the machine (then none).
func (s *Server) clientURL() string {
	if s.cfg.AdvertiseClientURL != "" {
		return s.cfg.AdvertiseClientURL
	}
	s.mu.Lock()
	ln := s.listener
	s.mu.Unlock()
	if ln == nil {
		return ""
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsUnspecified() {
		return ""
	}
	scheme := "http"
	if s.sec.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + addr.String()
}

// clientURLs returns a copy of the members' client URLs the state machine
// holds.
func (f *fsm) clientURLs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return maps.Clone(f.members)
}

// publishClientURLs runs on the leader until ctx ends: every
// clientURLInterval it writes the members' client URLs that changed, and
// forgets those of servers no longer in the configuration.
func (s *Server) publishClientURLs(ctx context.Context) {
	t := time.NewTicker(clientURLInterval)
	defer t.Stop()
	for {
		s.syncClientURLs(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) syncClientURLs(ctx context.Context) {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	have := s.fsm.clientURLs()
	want := map[string]string{}
	for _, srv := range f.Configuration().Servers {
		id := string(srv.ID)
		if id == s.cfg.NodeID {
			want[id] = s.clientURL()
		} else if u, err := s.memberClientURL(ctx, srv); err == nil {
			want[id] = u
		} else if u, ok := have[id]; ok {
			want[id] = u // unreachable: keep what it said last
		}
	}
	for id := range have {
		if _, ok := want[id]; !ok {
			want[id] = ""
		}
	}
	for id, u := range want {
		if have[id] == u {
			continue
		}
		if err := s.raft.Apply(encodeMemberEntry(id, u), clientURLInterval).Error(); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("member client URL not recorded", "member", id, "url", u, "err", err)
			}
			return
		}
		s.log.Info("member client URL recorded", "member", id, "url", u)
	}
}

// memberClientURL asks srv, on its peer port, for the client URL it
// advertises.
func (s *Server) memberClientURL(ctx context.Context, srv raft.Server) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clientURLInterval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+string(srv.Address)+"/v1/role", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: s.forward.transport}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r Role
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s", srv.Address, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r); err != nil {
		return "", err
	}
	if r.NodeID != string(srv.ID) {
		return "", fmt.Errorf("%s is %q, not %q", srv.Address, r.NodeID, srv.ID)
	}
	if r.ClientURL != "" && ValidateClientURL(r.ClientURL) != nil {
		return "", fmt.Errorf("%s advertises an invalid client URL %q", srv.Address, r.ClientURL)
	}
	return r.ClientURL, nil
}
