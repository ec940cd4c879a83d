package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/fencedio/fenced/server"
	"github.com/fencedio/fenced/store"
)

// NodeSpec is what a node process is told by the harness.
type NodeSpec struct {
	NodeID           string        `json:"nodeId"`
	DataDir          string        `json:"dataDir"`
	Listen           string        `json:"listen"`
	RaftListen       string        `json:"raftListen"`
	MinTTL           time.Duration `json:"minTtl,omitempty"`
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout,omitempty"`
}

// RunNode runs one fenced node, as cmd/fenced does, until ctx ends. It is
// the process that the harness kills with SIGKILL and starts again on the
// same data directory and ports. It serves at once, before it leads, like
// fenced itself, so that requests during recovery are part of the test.
func RunNode(ctx context.Context, spec NodeSpec, logs io.Writer) error {
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := server.New(server.Config{
		NodeID:           spec.NodeID,
		DataDir:          spec.DataDir,
		Listen:           spec.Listen,
		RaftListen:       spec.RaftListen,
		MinTTL:           spec.MinTTL,
		HeartbeatTimeout: spec.HeartbeatTimeout,
		Logger:           log,
		RaftLog:          logs,
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.NodeID, err)
	}
	log.Info("torture node starting", "listen", spec.Listen, "data_dir", spec.DataDir)
	err = srv.Serve(ctx)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// StoreSpec is what a store process is told by the harness.
type StoreSpec struct {
	DataDir   string `json:"dataDir"`
	Listen    string `json:"listen"`
	NoFencing bool   `json:"noFencing,omitempty"`
}

// RunStore runs the reference store until ctx ends.
func RunStore(ctx context.Context, spec StoreSpec, logs io.Writer) error {
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(store.Config{DataDir: spec.DataDir, NoFencing: spec.NoFencing, Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", spec.Listen)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return st.Serve(ctx, ln)
}

// Child roles: the harness starts Config.Command followed by a role and
// "--spec" and the role's JSON specification.
const (
	RoleNode   = "node"
	RoleWorker = "worker"
	RoleStore  = "store"
)

// RunChild runs one child process role with its JSON specification:
// events (workers) go to stdout, logs to stderr. `fencectl torture node|
// worker|store` and the package's tests call it.
func RunChild(ctx context.Context, role string, spec []byte, stdout, stderr io.Writer) error {
	switch role {
	case RoleNode:
		var s NodeSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("node spec: %w", err)
		}
		return RunNode(ctx, s, stderr)
	case RoleStore:
		var s StoreSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("store spec: %w", err)
		}
		return RunStore(ctx, s, stderr)
	case RoleWorker:
		var s WorkerSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("worker spec: %w", err)
		}
		return RunWorker(ctx, s, stdout)
	}
	return fmt.Errorf("unknown torture role %q", role)
}
