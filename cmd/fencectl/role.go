package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/fencedio/fenced/server"
)

// nodeRole is one node's answer to GET /v1/role, or why there is none.
type nodeRole struct {
	Endpoint string       `json:"endpoint"`
	Role     *server.Role `json:"role,omitempty"`
	Error    string       `json:"error,omitempty"`
}

// fetchRoles asks every node for its role.
func fetchRoles(ctx context.Context, hc *http.Client, nodes []string) []nodeRole {
	out := make([]nodeRole, len(nodes))
	for i, n := range nodes {
		out[i].Endpoint = n
		r, err := fetchRole(ctx, hc, n)
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		out[i].Role = r
	}
	return out
}

func fetchRole(ctx context.Context, hc *http.Client, node string) (*server.Role, error) {
	if !strings.Contains(node, "://") {
		node = "http://" + node
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(node, "/")+"/v1/role", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/v1/role: %s", node, resp.Status)
	}
	var r server.Role
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode role: %w", err)
	}
	return &r, nil
}

// describeRole says in a few words what a node is.
func describeRole(r nodeRole) string {
	if r.Role == nil {
		return "unreachable: " + r.Error
	}
	s := fmt.Sprintf("%s, %s, term %d", r.Role.NodeID, r.Role.Role, r.Role.Term)
	switch {
	case r.Role.Ready:
		s += ", serving as leader"
	case r.Role.LeaderID != "":
		s += fmt.Sprintf(", leader %s (%s)", r.Role.LeaderID, r.Role.LeaderAddress)
	default:
		s += ", no leader known"
	}
	return s
}
