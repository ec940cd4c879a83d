package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"sync/atomic"
	"time"
)

// Node is one lease-service node that the fault engine can crash and
// restart. The engine holds a slice of them: one today; a cluster's nodes
// (and partitions between them) later.
type Node interface {
	Name() string
	// Endpoint is the base URL of the node's lease API.
	Endpoint() string
	// Crashable reports whether Kill and Start are available.
	Crashable() bool
	// Kill stops the node abruptly (SIGKILL or the user's command).
	Kill(ctx context.Context) error
	// Start starts the node again on the same data and addresses.
	Start(ctx context.Context) error
	// Up reports whether the node is running as far as the engine knows.
	Up() bool
}

// localNode is a node process of this harness: `fencectl torture node`.
type localNode struct {
	spec     NodeSpec
	proc     *child
	endpoint string
}

func newLocalNode(command []string, spec NodeSpec, logPath string) (*localNode, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	argv := append(append([]string{}, command...), RoleNode, "--spec", string(b))
	return &localNode{
		spec:     spec,
		proc:     &child{name: spec.NodeID, argv: argv, logPath: logPath},
		endpoint: "http://" + spec.Listen,
	}, nil
}

func (n *localNode) Name() string                  { return n.spec.NodeID }
func (n *localNode) Endpoint() string              { return n.endpoint }
func (n *localNode) Crashable() bool               { return true }
func (n *localNode) Kill(context.Context) error    { return n.proc.kill() }
func (n *localNode) Start(context.Context) error   { return n.proc.start() }
func (n *localNode) Up() bool                      { return n.proc.running() }
func (n *localNode) stop(grace time.Duration) bool { return n.proc.stop(grace) }

// healthy reports whether the node answers /healthz within 100ms (and so
// has its signal handlers in place).
func (n *localNode) healthy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.endpoint+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// externalNode is a node the user runs. Faults need the user's commands.
type externalNode struct {
	endpoint        string
	killCmd, runCmd string
	down            atomic.Bool
}

func (n *externalNode) Name() string     { return n.endpoint }
func (n *externalNode) Endpoint() string { return n.endpoint }
func (n *externalNode) Crashable() bool  { return n.killCmd != "" && n.runCmd != "" }
func (n *externalNode) Up() bool         { return !n.down.Load() }

func (n *externalNode) Kill(ctx context.Context) error {
	n.down.Store(true)
	return runShell(ctx, n.killCmd)
}

func (n *externalNode) Start(ctx context.Context) error {
	if err := runShell(ctx, n.runCmd); err != nil {
		return err
	}
	n.down.Store(false)
	return nil
}

func runShell(ctx context.Context, command string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%q: %w: %s", command, err, out)
	}
	return nil
}

// waitHealthy polls url (a /healthz) until it answers 200 or ctx ends.
func waitHealthy(ctx context.Context, url string) error {
	hc := &http.Client{Timeout: time.Second}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become healthy: %w", url, ctx.Err())
		case <-t.C:
		}
	}
}
