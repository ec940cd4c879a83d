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
	resp, err := getOK(ctx, hc, nodeURL(node)+"/v1/role")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r server.Role
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decode role: %w", err)
	}
	return &r, nil
}

// nodeURL is a node as --endpoints names it, as a base URL: http:// added
// when it has no scheme, no trailing slash.
func nodeURL(node string) string {
	if !strings.Contains(node, "://") {
		node = "http://" + node
	}
	return strings.TrimRight(node, "/")
}

// preferredNode is the base URL of the node that serves as leader, else of
// the first node that answered, else of the first node named.
func preferredNode(roles []nodeRole, nodes []string) string {
	best := -1
	for i, r := range roles {
		if r.Role != nil && (best < 0 || r.Role.Ready && !roles[best].Role.Ready) {
			best = i
		}
	}
	if best >= 0 {
		return nodeURL(roles[best].Endpoint)
	}
	return nodeURL(nodes[0])
}

// getOK GETs url and returns the response if its status is 200 OK; the
// caller closes its body.
func getOK(ctx context.Context, hc *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return resp, nil
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
