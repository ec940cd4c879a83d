package server

import (
	"context"

	"github.com/fencedio/fenced/server/internal/membership"
)

// Client URLs. Every member advertises the base URL clients reach its API
// at (Config.AdvertiseClientURL, fenced --advertise-client-url). The leader
// asks each member of the configuration for it (GET /v1/role on the member's
// peer port) and writes the ones that changed to the log, so that every
// node's state machine holds every member's URL, a stopped member's too:
// ListMembers and /v1/role show them, and clients sync their endpoints from
// them (client.Config.AutoSyncInterval). A member's URL is forgotten once it
// leaves the configuration (membership.Publisher).
//
// Not guaranteed: a URL is what its member said, not checked to answer;
// a member whose URL changed is listed with its old one until the leader
// next asks it (every second).

// clientURL is the URL this node advertises: Config.AdvertiseClientURL, or
// by default the address its API listens on, unless that is every address
// of the machine (then none).
func (s *Server) clientURL() string {
	s.mu.Lock()
	ln := s.listener
	s.mu.Unlock()
	return membership.ClientURL(s.cfg.AdvertiseClientURL, ln, s.sec.TLS != nil)
}

// publishClientURLs runs on the leader until ctx ends: every second it
// writes the members' client URLs that changed, and forgets those of
// servers no longer in the configuration.
func (s *Server) publishClientURLs(ctx context.Context) {
	p := &membership.Publisher{Raft: s.raft, NodeID: s.cfg.NodeID, Self: s.clientURL, Applied: s.fsm.ClientURLs,
		Transport: s.forward.Transport(), Log: s.log}
	p.Run(ctx)
}
