package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/server"
)

// localCluster is a cluster of fenced processes on loopback ports, each on
// its own data directory under dir, for failover-bench.
type localCluster struct {
	bin   string // the fenced binary
	dir   string
	ic    string // --initial-cluster
	nodes []*localNode
	hc    *http.Client
}

type localNode struct {
	id, api, raft string
	url           string
	cmd           *exec.Cmd
	exited        chan struct{}
	starts        int
}

// startLocalCluster starts n nodes of a new cluster.
func startLocalCluster(bin, dir string, n int) (*localCluster, error) {
	c := &localCluster{bin: bin, dir: dir, hc: &http.Client{Timeout: time.Second}}
	var ic []string
	for i := range n {
		api, err := testutil.FreeAddr()
		if err != nil {
			return nil, err
		}
		raft, err := testutil.FreeAddr()
		if err != nil {
			return nil, err
		}
		nd := &localNode{id: fmt.Sprintf("n%d", i+1), api: api, raft: raft, url: "http://" + api}
		c.nodes = append(c.nodes, nd)
		ic = append(ic, nd.id+"="+nd.raft)
	}
	c.ic = strings.Join(ic, ",")
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// start starts node i on its data directory, with the same flags on every
// start (a restarted node ignores --initial-cluster).
func (c *localCluster) start(i int) error {
	nd := c.nodes[i]
	nd.starts++
	log, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", nd.id, nd.starts)))
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "--node-id", nd.id, "--initial-cluster", c.ic, "--listen", nd.api,
		"--raft-listen", nd.raft, "--data-dir", filepath.Join(c.dir, nd.id), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", nd.id, err)
	}
	nd.cmd, nd.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(nd.exited) }()
	return nil
}

func (c *localCluster) up(i int) bool {
	select {
	case <-c.nodes[i].exited:
		return false
	default:
		return true
	}
}

// kill kills node i with SIGKILL and waits for it to exit.
func (c *localCluster) kill(i int) {
	c.nodes[i].cmd.Process.Kill()
	<-c.nodes[i].exited
}

// stop kills every node still running.
func (c *localCluster) stop() {
	for i, nd := range c.nodes {
		if nd.cmd != nil && c.up(i) {
			c.kill(i)
		}
	}
}

func (c *localCluster) urls(live bool) []string {
	var out []string
	for i, nd := range c.nodes {
		if !live || c.up(i) {
			out = append(out, nd.url)
		}
	}
	return out
}

// settled returns the index of the leader once every node is running and
// up to date with it: it serves, every node names it, and every node has
// applied what the leader had committed.
func (c *localCluster) settled(ctx context.Context) (int, error) {
	type view struct {
		node  *localNode
		role  *server.Role
		stats server.Stats
	}
	var views []view
	leader := -1
	for i, nd := range c.nodes {
		if !c.up(i) {
			return -1, fmt.Errorf("%w: %s (see %s)", errNodeExited, nd.id, filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", nd.id, nd.starts)))
		}
		r, err := fetchRole(ctx, c.hc, nd.url)
		if err != nil {
			return -1, err
		}
		st, err := fetchStats(ctx, c.hc, nd.url)
		if err != nil {
			return -1, err
		}
		if r.Ready {
			leader = len(views)
		}
		views = append(views, view{nd, r, st})
	}
	if leader < 0 {
		return -1, errors.New("no node serves as leader")
	}
	lead := views[leader]
	for _, v := range views {
		if v.role.LeaderID != lead.node.id || v.stats.AppliedIndex < lead.stats.CommitIndex {
			return -1, fmt.Errorf("%s: leader %q, applied %d of %d", v.node.id, v.role.LeaderID, v.stats.AppliedIndex, lead.stats.CommitIndex)
		}
	}
	return slices.Index(c.nodes, lead.node), nil
}

// errNodeExited: a node that should be running has exited, so waiting for
// the cluster to settle is pointless (a node that cannot start again after
// a kill is what this bench exists to find).
var errNodeExited = errors.New("node exited")

// waitSettled polls settled until it succeeds, a node has exited, or within
// passes.
func (c *localCluster) waitSettled(ctx context.Context, within time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		leader, err := c.settled(ctx)
		if err == nil || errors.Is(err, errNodeExited) {
			return leader, err
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("cluster not settled within %v: %w", within, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
