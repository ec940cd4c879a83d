package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/go-zookeeper/zk"
)

// ZooKeeper, as Debian's zookeeper package installs it (3.8, with a JRE),
// run by the harness as plain java processes with a configuration file of
// its own: no system service is involved.

// DefaultZooKeeperJar is where Debian's zookeeper package puts the server.
// Its manifest names every other jar it needs.
const DefaultZooKeeperJar = "/usr/share/java/zookeeper.jar"

// zkLogJar routes the server's slf4j logging to its standard error (the
// node's log file); without a binding slf4j drops everything.
const zkLogJar = "/usr/share/java/slf4j-simple.jar"

// zkHeap is the server's heap limit: zkServer.sh's default (ZK_SERVER_HEAP,
// 1000 MB), as a ZooKeeper started the usual way gets it.
const zkHeap = "-Xmx1000m"

// ErrNoZooKeeper is returned (wrapped) when ZooKeeper or java is not
// installed.
var ErrNoZooKeeper = errors.New("ZooKeeper is not installed (Debian: apt-get install zookeeper)")

// ZooKeeperInstalled reports whether the zk systems can run with jar (empty:
// DefaultZooKeeperJar), and if not, why.
func ZooKeeperInstalled(jar string) error {
	if jar == "" {
		jar = DefaultZooKeeperJar
	}
	if _, err := os.Stat(jar); err != nil {
		return fmt.Errorf("%w: %v", ErrNoZooKeeper, err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return fmt.Errorf("%w: %v", ErrNoZooKeeper, err)
	}
	return nil
}

// startZKCluster starts n ZooKeeper servers (n = 1: standalone; else one
// ensemble, node i on 127.0.0.(i+1)) with data in dir, and waits until each
// serves reads.
func startZKCluster(ctx context.Context, jar, dir string, n int) ([]*server, error) {
	type addrs struct{ client, quorum, election string }
	nodes := make([]addrs, n)
	for i := range nodes {
		ip := fmt.Sprintf("127.0.0.%d", i+1)
		for _, a := range []*string{&nodes[i].client, &nodes[i].quorum, &nodes[i].election} {
			var err error
			if *a, err = testutil.FreeAddrOn(ip); err != nil {
				return nil, err
			}
		}
	}
	var servers []*server
	fail := func(err error) ([]*server, error) {
		for _, s := range servers {
			s.stop(5 * time.Second)
		}
		return nil, err
	}
	for i, a := range nodes {
		id := strconv.Itoa(i + 1)
		data := filepath.Join(dir, "zk"+id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return fail(err)
		}
		host, port, _ := net.SplitHostPort(a.client)
		// ZooKeeper's defaults, written out where the harness relies on
		// them: forceSync=yes (fsync the transaction log before acking a
		// write). maxClientCnxns=0 lifts the 60-connection limit per client
		// address: all benchmark clients come from one address.
		cfg := []string{
			"tickTime=2000", "initLimit=10", "syncLimit=5",
			"dataDir=" + data, "clientPort=" + port, "clientPortAddress=" + host,
			"forceSync=yes", "maxClientCnxns=0", "admin.enableServer=false",
			"4lw.commands.whitelist=srvr,mntr",
		}
		if n > 1 {
			for j, b := range nodes {
				h, q, _ := net.SplitHostPort(b.quorum)
				_, e, _ := net.SplitHostPort(b.election)
				cfg = append(cfg, fmt.Sprintf("server.%d=%s:%s:%s", j+1, h, q, e))
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(id+"\n"), 0o644); err != nil {
				return fail(err)
			}
		}
		cfgPath := filepath.Join(dir, "zoo"+id+".cfg")
		if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
			return fail(err)
		}
		p, err := startProc("zookeeper "+id, "java", []string{
			zkHeap, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
			"-cp", jar + ":" + zkLogJar,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
		}, nil, filepath.Join(dir, "zk"+id+".log"), false)
		if err != nil {
			return fail(err)
		}
		servers = append(servers, &server{proc: p, endpoint: a.client})
	}
	for _, s := range servers {
		if err := s.waitReady(ctx, 90*time.Second, zkReady(s.endpoint)); err != nil {
			return fail(err)
		}
	}
	return servers, nil
}

// zkReady probes one ZooKeeper server: a session of its own and a read.
func zkReady(endpoint string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := zkConnect(ctx, []string{endpoint})
		if err != nil {
			return err
		}
		defer c.Close()
		_, _, err = c.Exists("/")
		return err
	}
}

// zkConnect opens a session with servers and waits until it is
// established. The session timeout is leaseTTL: the client pings every
// third of it, as fenced's client renews its leases.
func zkConnect(ctx context.Context, servers []string) (*zk.Conn, error) {
	c, events, err := zk.Connect(servers, leaseTTL, zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("zookeeper: connection closed before a session was established")
			}
			if ev.State == zk.StateHasSession {
				return c, nil
			}
		case <-ctx.Done():
			c.Close()
			return nil, fmt.Errorf("zookeeper session: %w", ctx.Err())
		}
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkSystem is ZooKeeper, one server or an ensemble, through go-zookeeper's
// lock recipe.
type zkSystem struct {
	label   string
	servers []string
}

func (s zkSystem) name() string { return s.label }

// dial opens one session, as a lock user holds one: it carries the
// client's heartbeats and owns its ephemeral nodes. The client library
// picks one of the servers (at random) and moves on only when it fails.
// The session closes when ctx ends, so that a run that hangs in the
// recipe (which takes no context) still ends.
func (s zkSystem) dial(ctx context.Context) (conn, error) {
	c, err := zkConnect(ctx, s.servers)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, c.Close)
	return &zkConn{c: c}, nil
}

type zkConn struct{ c *zk.Conn }

// lock runs the standard recipe (go-zookeeper's Lock, as Curator's
// InterProcessMutex): create an ephemeral sequential node under the key,
// list the children, and if one is older, watch the one just before and
// list again when it goes. On a key of its own (acquire-release) that is a
// create and a list; release deletes the node. The recipe always waits in
// line: wait only documents the workload.
func (z *zkConn) lock(ctx context.Context, key string, wait bool) (held, error) {
	l := zk.NewLock(z.c, "/"+key, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, err
	}
	return zkHeld{l}, nil
}

// ZooKeeper has no renewal per lock: the session's heartbeats (a ping
// every third of the session timeout, no disk write) keep every ephemeral
// node of the session alive at once.
func (z *zkConn) hold(context.Context, string) (renewable, error) {
	return nil, errNoRenewal
}

func (z *zkConn) holdStream(context.Context, string) (renewable, error) {
	return nil, errNoRenewal
}

var errNoRenewal = errors.New("zookeeper has no per-lock renewal: the session heartbeat keeps all of a session's locks")

func (z *zkConn) close() { z.c.Close() }

type zkHeld struct{ l *zk.Lock }

func (h zkHeld) release(context.Context) error { return h.l.Unlock() }

// zkMntr returns one figure of a server's mntr command (for example
// zk_znode_count).
func zkMntr(endpoint, key string) (int64, error) {
	c, err := net.DialTimeout("tcp", endpoint, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("mntr")); err != nil {
		return 0, err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for line := range strings.Lines(b.String()) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("zookeeper mntr: no %s in %q", key, b.String())
}

// runZKMemory is the memory workload against a fresh ZooKeeper server: n
// locks taken with the recipe and held, from memConns sessions with
// memPerConn locks being taken at a time on each. Each lock is two
// znodes: its lock node (persistent, created by the recipe on first use)
// and the holder's ephemeral sequential node under it.
func runZKMemory(ctx context.Context, n int, dir, system, jar string, _ int, logf func(string, ...any)) (*Memory, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("memory: starting a fresh %s", system)
	nodes, err := startZKCluster(ctx, jar, dir, 1)
	if err != nil {
		return nil, err
	}
	srv := nodes[0]
	defer srv.stop(30 * time.Second)
	m := &Memory{System: system, Leases: n}
	if m.IdleRSS, _, err = srv.rss(); err != nil {
		return nil, err
	}
	logf("memory: zookeeper pid %d idle RSS %s; taking %d locks", srv.pid(), fmtBytes(m.IdleRSS), n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-srv.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	created, sessions, dialErr := createLocks(ctx, srv.endpoint, n, m, logf)
	// The sessions hold the locks: they stay open until the server stops.
	defer func() {
		for _, c := range sessions {
			c.Close()
		}
	}()
	if srv.exited() {
		return nil, fmt.Errorf("memory: zookeeper exited after %d locks (%v); its log ends:\n%s", created, srv.waitErr, srv.logTail())
	}
	if dialErr != nil {
		return nil, fmt.Errorf("memory: session: %w", dialErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.CreateSeconds = time.Since(start).Seconds()
	m.Created = created
	gauge := func(context.Context) (int64, error) { return zkMntr(srv.endpoint, "zk_ephemerals_count") }
	if err := measureMemory(ctx, srv, m, gauge, logf); err != nil {
		return nil, err
	}
	if m.Created == 0 {
		return nil, errors.New("memory: no lock was taken: " + m.FirstError)
	}
	if heap, err := jvmHeapAfterGC(ctx, srv.pid()); err != nil {
		logf("memory: no JVM heap figure: %v", err)
	} else {
		m.HeapAfterGC = heap
		logf("memory: zookeeper heap used after a full GC: %s", fmtBytes(heap))
	}
	return m, nil
}

// createLocks takes locks 0..n-1 with the recipe over memConns sessions,
// memPerConn at a time on each, logging progress, and records failed ones
// in m. It returns how many were taken, the sessions, which hold the locks
// until closed, and why a session could not be opened, if one could not.
func createLocks(ctx context.Context, endpoint string, n int, m *Memory, logf func(string, ...any)) (int64, []*zk.Conn, error) {
	var (
		next, created atomic.Int64
		errs          atomic.Uint64
		errOnce       sync.Once
		wg            sync.WaitGroup
		sessions      []*zk.Conn
		dialErr       error
	)
	defer logProgress(&created, n, "locks", logf)()
	for range memConns {
		c, err := zkConnect(ctx, []string{endpoint})
		if err != nil {
			dialErr = err
			break
		}
		sessions = append(sessions, c)
		for range memPerConn {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
					l := zk.NewLock(c, fmt.Sprintf("/fencedbench/memory/%08d", i), zk.WorldACL(zk.PermAll))
					if err := l.Lock(); err != nil {
						errs.Add(1)
						errOnce.Do(func() { m.FirstError = err.Error() })
						continue
					}
					created.Add(1)
				}
			})
		}
	}
	wg.Wait()
	m.Errors = errs.Load()
	return created.Load(), sessions, dialErr
}

// jvmHeapAfterGC runs a full collection in JVM pid and returns the heap it
// then uses, through jcmd (a JDK tool: absent with a bare JRE).
func jvmHeapAfterGC(ctx context.Context, pid int) (int64, error) {
	jcmd, err := exec.LookPath("jcmd")
	if err != nil {
		return 0, err
	}
	p := strconv.Itoa(pid)
	if out, err := exec.CommandContext(ctx, jcmd, p, "GC.run").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("jcmd GC.run: %w: %s", err, out)
	}
	out, err := exec.CommandContext(ctx, jcmd, p, "GC.heap_info").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("jcmd GC.heap_info: %w: %s", err, out)
	}
	// " garbage-first heap   total 712704K, used 192632K [...]"
	_, after, ok := strings.Cut(string(out), " used ")
	kb, _, ok2 := strings.Cut(after, "K")
	v, perr := strconv.ParseInt(strings.TrimSpace(kb), 10, 64)
	if !ok || !ok2 || perr != nil {
		return 0, fmt.Errorf("jcmd GC.heap_info: no heap figure in %q", out)
	}
	return v << 10, nil
}
