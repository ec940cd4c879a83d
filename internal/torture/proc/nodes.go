package proc

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

// LocalNode is a node process of this harness: `fencectl torture node`.
type LocalNode struct {
	Spec     NodeSpec
	Proc     *Child
	endpoint string
}

// NewLocalNode is node spec.NodeID, run as command plus `node --spec`, its
// log appended to logPath. It is not started.
func NewLocalNode(command []string, spec NodeSpec, logPath string) (*LocalNode, error) {
	n := &LocalNode{
		Proc:     &Child{Name: spec.NodeID, LogPath: logPath},
		endpoint: "http://" + spec.Listen,
	}
	n.Respec(command, spec)
	return n, nil
}

// Respec changes what the next start of the node is told.
func (n *LocalNode) Respec(command []string, spec NodeSpec) {
	b, _ := json.Marshal(spec)
	n.Spec = spec
	n.Proc.mu.Lock()
	n.Proc.Argv = append(append([]string{}, command...), RoleNode, "--spec", string(b))
	n.Proc.mu.Unlock()
}

func (n *LocalNode) Name() string                  { return n.Spec.NodeID }
func (n *LocalNode) Endpoint() string              { return n.endpoint }
func (n *LocalNode) Crashable() bool               { return true }
func (n *LocalNode) Kill(context.Context) error    { return n.Proc.Kill() }
func (n *LocalNode) Start(context.Context) error   { return n.Proc.Start() }
func (n *LocalNode) Up() bool                      { return n.Proc.Running() }
func (n *LocalNode) Stop(grace time.Duration) bool { return n.Proc.Stop(grace) }

// Healthy reports whether the node answers /healthz within 100ms (and so
// has its signal handlers in place).
func (n *LocalNode) Healthy() bool {
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

// ExternalNode is a node the user runs. Faults need the user's commands.
type ExternalNode struct {
	endpoint        string
	killCmd, runCmd string
	down            atomic.Bool
}

// NewExternalNode is the node at endpoint, killed and started again with
// the shell commands killCmd and runCmd ("": the node is not crashed).
func NewExternalNode(endpoint, killCmd, runCmd string) *ExternalNode {
	return &ExternalNode{endpoint: endpoint, killCmd: killCmd, runCmd: runCmd}
}

func (n *ExternalNode) Name() string     { return n.endpoint }
func (n *ExternalNode) Endpoint() string { return n.endpoint }
func (n *ExternalNode) Crashable() bool  { return n.killCmd != "" && n.runCmd != "" }
func (n *ExternalNode) Up() bool         { return !n.down.Load() }

func (n *ExternalNode) Kill(ctx context.Context) error {
	n.down.Store(true)
	return runShell(ctx, n.killCmd)
}

func (n *ExternalNode) Start(ctx context.Context) error {
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

// WaitHealthy polls url (a /healthz) until it answers 200 or ctx ends.
func WaitHealthy(ctx context.Context, url string) error {
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
