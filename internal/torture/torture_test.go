package torture

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/proc"
)

// TestMain doubles as the harness's child processes: Config.Command is this
// test binary, which then runs a node, a worker or the store instead of the
// tests. No separate build is needed, and under -race the children run
// with the race detector too.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[2] == "--spec" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := proc.RunChild(ctx, os.Args[1], []byte(os.Args[3]), os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "torture child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// logWriter sends the engine's progress to t.Log until the test ends.
type logWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// tortureConfig is the CI run: small enough for two cores, with every
// fault on. The output directory is kept when the test fails.
func tortureConfig(t *testing.T, d time.Duration) Config {
	t.Helper()
	if testing.Short() {
		t.Skip("torture runs take tens of seconds; skipped with -short")
	}
	testenv.SkipUnlessLong(t)
	if !proc.SignalsSupported {
		t.Skip(proc.ErrUnsupported)
	}
	dsn := testenv.PostgresURL(t)
	redisAddr := testenv.RedisAddr(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fenced-torture-")
	if err != nil {
		t.Fatal(err)
	}
	lw := &logWriter{t: t}
	t.Cleanup(func() {
		lw.mu.Lock()
		lw.done = true
		lw.mu.Unlock()
		if t.Failed() {
			t.Logf("histories, logs and summary kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return Config{
		Duration:           d,
		Workers:            4,
		Keys:               3,
		TTL:                time.Second,
		CrashInterval:      6 * time.Second,
		StoreCrashInterval: 15 * time.Second,
		PostgresDSN:        dsn,
		RedisAddr:          redisAddr,
		OutputDir:          dir,
		Command:            []string{self},
		CheckTimeout:       30 * time.Second,
		Log:                lw,
	}
}

func runTorture(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("torture run: %v", err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	return rep
}

// requireFaults fails a run that passed without being tortured.
func requireFaults(t *testing.T, rep *Report) {
	t.Helper()
	for what, n := range map[string]int{
		"grants": rep.Acquisitions.OK, "renewals": rep.Renewals.OK, "reads": rep.Gets.OK,
		"acknowledged store writes": rep.StoreWrites.OK, "committed SQL writes": rep.SQLWrites.OK, "acknowledged Redis writes": rep.RedisWrites.OK,
		"node crashes": rep.Crashes, "pauses": rep.Pauses, "delayed writes": rep.DelayedWrites.Delivered,
		"snapshots": rep.SnapshotsTaken, "snapshot restores": rep.SnapshotRestores,
		"lease calls over Session streams": rep.SessionCalls,
	} {
		if n == 0 {
			t.Errorf("the run had no %s", what)
		}
	}
	for _, name := range []string{check.NameStoreOrder, check.NameSQLOrder, check.NameRedisOrder, check.NameSequences, check.NameProvenance, check.NameTokens, check.NameAckedPresent,
		check.NameExclusion, check.NameRenewals, check.NameLinearizability, check.NameProcesses} {
		if c := rep.Check(name); c.Name == "" || c.Skipped != "" || c.Checked == 0 {
			t.Errorf("checker %s did not run: %+v", name, c)
		}
	}
}

func TestTorture(t *testing.T) {
	cfg := tortureConfig(t, 45*time.Second)
	// Most kills right after an acknowledgement: about 7 kills in a run,
	// and one that follows none would leave the check below to chance.
	cfg.AfterAckShare = 0.6
	rep := runTorture(t, cfg)
	requireFaults(t, rep)
	if rep.CrashesAfterAck == 0 {
		t.Error("no crash came right after an acknowledgement")
	}
	if rep.StaleRejections == 0 {
		t.Error("no write was rejected as stale: the pauses and delays did not reach the resources")
	}
	for _, c := range rep.Checks {
		if c.Violations > 0 {
			t.Errorf("%s: %d violations: %q", c.Name, c.Violations, c.Examples)
		}
	}
	if !rep.Passed() {
		t.Error("report says the run failed")
	}
}

// TestTortureNoFencing is the negative control: with fencing off at the
// resources, the same run must make the checker report stale overwrites.
// A checker that cannot fail does not count.
func TestTortureNoFencing(t *testing.T) {
	cfg := tortureConfig(t, 25*time.Second)
	cfg.NoFencing = true
	cfg.StoreCrashInterval = 0
	cfg.PauseProbability = 0.5
	rep := runTorture(t, cfg)
	requireFaults(t, rep)
	if n := rep.Check(check.NameStoreOrder).Violations; n == 0 {
		t.Errorf("negative control: %s reported no stale overwrite", check.NameStoreOrder)
	}
	for _, c := range rep.Checks {
		if c.Violations > 0 && !expectedToFail(c.Name) {
			t.Errorf("%s: %d violations without fencing, where fencing plays no part: %q", c.Name, c.Violations, c.Examples)
		}
	}
	if !rep.Passed() {
		t.Error("report says the negative control failed")
	}
}

// TestQueueTorture runs the queue path through RabbitMQ: workers publish
// messages stamped with their lease, paused holders' messages and those
// of the delay queue arrive behind newer ones, the consumer is killed,
// half the time between a commit and its ack. The run must pass, and
// every kind of outcome must have happened, so that the checker had
// something to judge.
func TestQueueTorture(t *testing.T) {
	cfg := tortureConfig(t, 60*time.Second)
	cfg.QueueURL = testenv.AMQPURL(t)
	cfg.StoreCrashInterval = 0
	rep := runTorture(t, cfg)
	c := rep.Check(check.NameQueue)
	if c.Skipped != "" || c.Checked == 0 {
		t.Fatalf("checker %s did not run: %+v", check.NameQueue, c)
	}
	if c.Violations > 0 || !rep.Passed() {
		t.Errorf("%d violations in all; %s: %d: %q", rep.Violations, c.Name, c.Violations, c.Examples)
	}
	q := rep.Queue
	for what, n := range map[string]int{
		"confirmed publishes": q.Confirmed, "resends": q.Resent, "messages through the delay queue": q.Delayed,
		"applied messages": q.Applied, "stale messages": q.Stale, "duplicates": q.Duplicate,
		"consumer kills": q.ConsumerKills, "kills between a commit and its ack": q.KillsAfterCommit,
		"redeliveries after a kill": q.RedeliveredAfterKill, "pauses": rep.Pauses,
	} {
		if n == 0 {
			t.Errorf("the run had no %s", what)
		}
	}
}
