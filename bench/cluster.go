package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// Systems the harness can run. fenced-bolt is fenced built from an older
// revision whose raft log lives in raft-boltdb, for before/after tables;
// it needs Config.FencedBoltBin. fenced-1p is fenced with GOMAXPROCS=1.
var systemSpecs = []sysSpec{
	{name: "fenced", nodes: 1, ref: "etcd"},
	{name: "fenced-bolt", nodes: 1, ref: "etcd"},
	{name: "fenced-1p", nodes: 1, ref: "etcd", env: []string{"GOMAXPROCS=1"}},
	{name: "etcd", nodes: 1, etcd: true},
	{name: "fenced-3", nodes: 3, ref: "etcd-3"},
	{name: "fenced-3-leader", nodes: 3, ref: "etcd-3", leaderFirst: true},
	{name: "etcd-3", nodes: 3, etcd: true},
	{name: "zk", nodes: 1, ref: "etcd", zk: true},
	{name: "zk-3", nodes: 3, ref: "etcd-3", zk: true},
}

// defaultSystems are run when Config.Systems is empty.
var defaultSystems = []string{"fenced", "etcd"}

// sysSpec is one system under test and how to start it.
type sysSpec struct {
	name  string
	nodes int
	etcd  bool
	zk    bool   // ZooKeeper; its binary is the server's jar
	ref   string // the etcd system its ratios are taken against
	// leaderFirst gives every client the leader as its first endpoint, so
	// that no call is forwarded by a follower.
	leaderFirst bool
	// env is added to the environment of its processes (fenced, one node).
	env []string
}

func specByName(name string) (sysSpec, bool) {
	for _, s := range systemSpecs {
		if s.name == name {
			return s, true
		}
	}
	return sysSpec{}, false
}

// SystemNames lists the systems that Config.Systems can select.
func SystemNames() []string {
	var names []string
	for _, s := range systemSpecs {
		names = append(names, s.name)
	}
	return names
}

// deployment is a running system: its processes and a way to dial it.
type deployment struct {
	spec  sysSpec
	sys   system
	nodes []*server
}

func (d *deployment) stop() {
	for _, n := range d.nodes {
		n.stop(10 * time.Second)
	}
}

// exited returns an error when one of the processes has exited.
func (d *deployment) exited() error {
	for _, n := range d.nodes {
		if n.exited() {
			return fmt.Errorf("%s: %s exited: %v\n%s", d.spec.name, n.name, n.waitErr, n.logTail())
		}
	}
	return nil
}

// cpu returns the CPU time (user and system) all its processes have used.
func (d *deployment) cpu() (time.Duration, error) {
	var sum time.Duration
	for _, n := range d.nodes {
		t, err := procCPU(n.pid())
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

// deploy starts spec's processes with bin in dir.
func deploy(ctx context.Context, spec sysSpec, bin, dir string, maxLeases int) (*deployment, error) {
	d := &deployment{spec: spec}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	switch {
	case spec.etcd:
		d.nodes, err = startEtcdCluster(ctx, bin, dir, spec.nodes)
	case spec.zk:
		d.nodes, err = startZKCluster(ctx, bin, dir, spec.nodes)
	case spec.nodes == 1:
		var s *server
		s, err = startFenced(ctx, bin, dir, maxLeases, spec.env)
		if s != nil {
			d.nodes = []*server{s}
		}
	default:
		d.nodes, err = startFencedCluster(ctx, bin, dir, spec.nodes, maxLeases)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	var endpoints []string
	for _, n := range d.nodes {
		endpoints = append(endpoints, n.endpoint)
	}
	switch {
	case spec.etcd:
		d.sys = etcdSystem{label: spec.name, endpoints: endpoints}
	case spec.zk:
		d.sys = zkSystem{label: spec.name, servers: endpoints}
	default:
		d.sys = &fencedSystem{label: spec.name, endpoints: endpoints, leaderFirst: spec.leaderFirst}
	}
	return d, nil
}

// freeAddrs returns n free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := testutil.FreeAddr()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// member starts member i (0-based) of a cluster whose members are listed
// in initialCluster, serving clients on api and its peers on peer.
type member func(i int, initialCluster []string, api, peer string) (*server, error)

// startCluster starts n members, each with an API and a peer address of
// its own and the same member list (listed(i, peer) names member i), then
// waits until ready says each serves. On failure it stops the members it
// started.
func startCluster(ctx context.Context, n int, listed func(i int, peer string) string, start member, ready func(*server) func(context.Context) error) ([]*server, error) {
	apis, err := freeAddrs(n)
	if err != nil {
		return nil, err
	}
	peers, err := freeAddrs(n)
	if err != nil {
		return nil, err
	}
	var nodes []*server
	fail := func(err error) ([]*server, error) {
		for _, s := range nodes {
			s.stop(5 * time.Second)
		}
		return nil, err
	}
	ic := make([]string, n)
	for i := range n {
		ic[i] = listed(i, peers[i])
	}
	for i := range n {
		s, err := start(i, ic, apis[i], peers[i])
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, s)
	}
	for _, s := range nodes {
		if err := s.waitReady(ctx, 60*time.Second, ready(s)); err != nil {
			return fail(err)
		}
	}
	return nodes, nil
}

// startFencedCluster starts n fenced nodes forming one cluster and waits
// until every node serves acquisitions.
func startFencedCluster(ctx context.Context, bin, dir string, n, maxLeases int) ([]*server, error) {
	named := func(i int, raft string) string { return fmt.Sprintf("n%d=%s", i+1, raft) }
	start := func(i int, ic []string, api, raft string) (*server, error) {
		id := fmt.Sprintf("n%d", i+1)
		data := filepath.Join(dir, id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		p, err := startProc("fenced "+id, bin, append([]string{
			"--node-id", id, "--initial-cluster", strings.Join(ic, ","),
			"--data-dir", data, "--listen", api, "--raft-listen", raft,
			"--log-level", "warn", "--max-leases", strconv.Itoa(maxLeases),
		}, perClientLimits(bin, maxLeases)...), nil, filepath.Join(dir, id+".log"), false)
		if err != nil {
			return nil, err
		}
		return &server{proc: p, endpoint: "http://" + api}, nil
	}
	return startCluster(ctx, n, named, start, func(s *server) func(context.Context) error { return healthz(s.endpoint) })
}

// healthz probes a fenced node's /healthz.
func healthz(endpoint string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	}
}

// startEtcdCluster starts n etcdnode members forming one cluster (n = 1:
// a single member) and waits until each serves reads.
func startEtcdCluster(ctx context.Context, bin, dir string, n int) ([]*server, error) {
	named := func(i int, peer string) string { return fmt.Sprintf("m%d=http://%s", i+1, peer) }
	start := func(i int, ic []string, client, peer string) (*server, error) {
		name := fmt.Sprintf("m%d", i+1)
		p, err := startProc("etcd "+name, bin, []string{
			"--name", name, "--initial-cluster", strings.Join(ic, ","),
			"--data-dir", filepath.Join(dir, name),
			"--client-url", "http://" + client, "--peer-url", "http://" + peer,
		}, nil, filepath.Join(dir, name+".log"), true)
		if err != nil {
			return nil, err
		}
		return &server{proc: p, endpoint: client}, nil
	}
	ready := func(s *server) func(context.Context) error {
		return func(ctx context.Context) error {
			cli, err := newEtcdClient([]string{s.endpoint})
			if err != nil {
				return err
			}
			defer cli.Close()
			_, err = cli.Get(ctx, "fencedbench/ready")
			return err
		}
	}
	return startCluster(ctx, n, named, start, ready)
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100
// on every Linux architecture Go runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the user and system CPU time process pid has used
// (utime and stime in /proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after it. utime and stime are fields 14 and 15 of the line.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// selfCPU returns the user and system CPU time of the harness process: its
// benchmark clients and the load generator.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
