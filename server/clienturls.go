package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/fencedio/fenced/server/internal/fsm"
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
	have := s.fsm.ClientURLs()
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
		if err := s.raft.Apply(fsm.EncodeMemberEntry(id, u), clientURLInterval).Error(); err != nil {
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
