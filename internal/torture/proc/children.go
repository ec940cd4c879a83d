package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/failpoint/failstore"
	"github.com/fencedio/fenced/internal/torture/queue"
	"github.com/fencedio/fenced/internal/torture/worker"
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
	// SnapshotThreshold and SnapshotInterval are the server's; zero means
	// its default.
	SnapshotThreshold uint64        `json:"snapshotThreshold,omitempty"`
	SnapshotInterval  time.Duration `json:"snapshotInterval,omitempty"`
	// InitialCluster ("id=host:port,...", raft addresses as peers dial
	// them), RaftAdvertise and Join are the cluster flags of fenced.
	InitialCluster string `json:"initialCluster,omitempty"`
	RaftAdvertise  string `json:"raftAdvertise,omitempty"`
	Join           bool   `json:"join,omitempty"`
}

// StatsPrefix starts the lines in which a node reports how many snapshots
// it took and restored; the harness sums the last line of each process.
const StatsPrefix = "torture-stats "

// RunNode runs one fenced node, as cmd/fenced does, until ctx ends. It is
// the process that the harness kills with SIGKILL and starts again on the
// same data directory and ports. It serves at once, before it leads, like
// fenced itself, so that requests during recovery are part of the test.
//
// SIGUSR1 makes it take a snapshot at once (the harness sends it just
// before some kills). It writes a StatsPrefix line to logs whenever its
// count of snapshots taken or restored changes.
func RunNode(ctx context.Context, spec NodeSpec, logs io.Writer) error {
	// Before anything else: SIGUSR1 would otherwise kill the process.
	force := make(chan os.Signal, 1)
	notifySnapshot(force)
	defer signal.Stop(force)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := failpoint.Check(); err != nil {
		return fmt.Errorf("node %s: %w", spec.NodeID, err)
	}
	peers, err := server.ParseInitialCluster(spec.InitialCluster)
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.NodeID, err)
	}
	srv, err := server.New(server.Config{
		InitialCluster:    peers,
		RaftAdvertise:     spec.RaftAdvertise,
		Join:              spec.Join,
		NodeID:            spec.NodeID,
		DataDir:           spec.DataDir,
		Listen:            spec.Listen,
		RaftListen:        spec.RaftListen,
		MinTTL:            spec.MinTTL,
		HeartbeatTimeout:  spec.HeartbeatTimeout,
		SnapshotThreshold: spec.SnapshotThreshold,
		SnapshotInterval:  spec.SnapshotInterval,
		Logger:            log,
		RaftLogger:        log,
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", spec.NodeID, err)
	}
	log.Info("torture node starting", "listen", spec.Listen, "data_dir", spec.DataDir)
	sctx, stopStats := context.WithCancel(ctx)
	defer stopStats()
	go nodeSnapshots(sctx, srv, force, log, logs)
	err = srv.Serve(ctx)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// nodeSnapshots takes a snapshot on every signal on force and reports the
// node's snapshot counts whenever they change, until ctx ends. The counts
// are polled: a SIGKILL can come at any time, so a line is written as soon
// as possible after each change.
func nodeSnapshots(ctx context.Context, srv *server.Server, force <-chan os.Signal, log *slog.Logger, logs io.Writer) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var lastTaken, lastRestored uint64
	report := func() {
		taken, restored := srv.SnapshotStats()
		if taken != lastTaken || restored != lastRestored {
			lastTaken, lastRestored = taken, restored
			fmt.Fprintf(logs, "%ssnapshots=%d restores=%d\n", StatsPrefix, taken, restored)
		}
	}
	report()
	for {
		select {
		case <-ctx.Done():
			return
		case <-force:
			if err := srv.Snapshot(ctx); err != nil {
				log.Warn("forced snapshot", "err", err)
			}
		case <-t.C:
		}
		report()
	}
}

// StoreSpec is what a store process is told by the harness.
type StoreSpec struct {
	DataDir   string `json:"dataDir"`
	Listen    string `json:"listen"`
	NoFencing bool   `json:"noFencing,omitempty"`
}

// RunStore runs the reference store until ctx ends. With simulated power
// losses (failpoint.LoseUnsyncedEnvVar, in a tagged build) its file goes
// back to its durable image first, and it serves without the store's
// connection and body limits, through the handler that takes the images.
func RunStore(ctx context.Context, spec StoreSpec, logs io.Writer) error {
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := failpoint.Check(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(spec.DataDir, store.FileName)
	if lost, err := failstore.RestoreDurable(path); err != nil {
		return fmt.Errorf("store: simulated power loss: %w", err)
	} else if lost {
		log.Warn("simulated power loss: the store's file is back at its last acknowledged write")
	}
	st, err := store.Open(store.Config{DataDir: spec.DataDir, NoFencing: spec.NoFencing, Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", spec.Listen)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if !failpoint.LosesUnsynced() {
		return st.Serve(ctx, ln)
	}
	h, img, err := failstore.WrapStoreHandler(st.Handler(), path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer img.Close()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), store.ShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("store: serve: %w", err)
	}
	return nil
}

// RestoreSpec is what a restore process is told: fenced restore of one
// member's data directory from a backup file.
type RestoreSpec struct {
	Backup         string `json:"backup"`
	DataDir        string `json:"dataDir"`
	NodeID         string `json:"nodeId"`
	InitialCluster string `json:"initialCluster"`
	StartFloor     uint64 `json:"startFloor"`
}

// RunRestore writes spec.DataDir from the backup, as fenced restore does
// (with its default bump), in a process of its own, so that the nodes'
// failpoints apply to it too.
func RunRestore(spec RestoreSpec, stdout io.Writer) error {
	if err := failpoint.Check(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	peers, err := server.ParseInitialCluster(spec.InitialCluster)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f, err := os.Open(spec.Backup)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	start, err := server.RestoreBackup(server.RestoreConfig{DataDir: spec.DataDir, NodeID: spec.NodeID,
		InitialCluster: peers, StartFloor: spec.StartFloor}, f)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(stdout, "restored %s into %s: tokens start above %d\n", spec.Backup, spec.DataDir, start)
	return nil
}

// Child roles: the harness starts Config.Command followed by a role and
// "--spec" and the role's JSON specification.
const (
	RoleNode    = "node"
	RoleWorker  = "worker"
	RoleStore   = "store"
	RoleRestore = "restore"
	// RoleConsumer is the queue consumer (queue.RunConsumer).
	RoleConsumer = "consumer"
)

// RunChild runs one child process role with its JSON specification:
// events (workers, the consumer) go to stdout, logs to stderr. `fencectl torture node|
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
	case RoleRestore:
		var s RestoreSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("restore spec: %w", err)
		}
		return RunRestore(s, stdout)
	case RoleConsumer:
		var s queue.ConsumerSpec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("consumer spec: %w", err)
		}
		return queue.RunConsumer(ctx, s, stdout)
	case RoleWorker:
		var s worker.Spec
		if err := json.Unmarshal(spec, &s); err != nil {
			return fmt.Errorf("worker spec: %w", err)
		}
		return worker.Run(ctx, s, stdout)
	}
	return fmt.Errorf("unknown torture role %q", role)
}
