package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/hashicorp/raft"
)

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

// ClientURL is the URL a node advertises: advertise (its
// Config.AdvertiseClientURL), or by default the address ln, its API's
// listener, listens on, https with tls; none while ln is nil or when it
// listens on every address of the machine.
func ClientURL(advertise string, ln net.Listener, tls bool) string {
	if advertise != "" {
		return advertise
	}
	if ln == nil {
		return ""
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || addr.IP.IsUnspecified() {
		return ""
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + addr.String()
}

// Publisher writes the members' client URLs to the log, on the leader.
type Publisher struct {
	Raft   *raft.Raft
	NodeID string
	// Self returns the client URL this node advertises.
	Self func() string
	// Applied returns the members' client URLs the log holds, by member ID
	// (fsm.FSM.ClientURLs).
	Applied func() map[string]string
	// Transport reaches the members' peer ports, where GET /v1/role
	// answers.
	Transport http.RoundTripper
	Log       *slog.Logger
}

// Run runs on the leader until ctx ends: every clientURLInterval it
// writes the members' client URLs that changed, and forgets those of
// servers no longer in the configuration.
func (p *Publisher) Run(ctx context.Context) {
	t := time.NewTicker(clientURLInterval)
	defer t.Stop()
	for {
		p.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Publisher) sync(ctx context.Context) {
	f := p.Raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	have := p.Applied()
	want := map[string]string{}
	for _, srv := range f.Configuration().Servers {
		id := string(srv.ID)
		if id == p.NodeID {
			want[id] = p.Self()
		} else if u, err := p.memberClientURL(ctx, srv); err == nil {
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
		if err := p.Raft.Apply(fsm.EncodeMemberEntry(id, u), clientURLInterval).Error(); err != nil {
			if ctx.Err() == nil {
				p.Log.Warn("member client URL not recorded", "member", id, "url", u, "err", err)
			}
			return
		}
		p.Log.Info("member client URL recorded", "member", id, "url", u)
	}
}

// memberClientURL asks srv, on its peer port, for the client URL it
// advertises.
func (p *Publisher) memberClientURL(ctx context.Context, srv raft.Server) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, clientURLInterval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+string(srv.Address)+"/v1/role", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: p.Transport}).Do(req)
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
