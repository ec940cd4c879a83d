package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const benchModule = "github.com/fencedio/fenced/bench"

// findBenchDir looks for the bench module's go.mod in the working directory,
// its parents, and a bench/ subdirectory of each.
func findBenchDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		for _, cand := range []string{dir, filepath.Join(dir, "bench")} {
			if isBenchModule(cand) {
				return cand, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNoBenchDir
		}
		dir = parent
	}
}

func isBenchModule(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == benchModule
		}
	}
	return false
}

// goBuild builds pkg of the module in dir into out.
func goBuild(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}

// proc is a server process started by the harness.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	stdin   io.Closer // etcdnode exits when this closes
	done    chan struct{}
	waitErr error
}

// startProc starts bin with env added to this process's environment and its
// output in logPath. The child gets SIGKILL
// if the harness dies (Pdeathsig). Pdeathsig fires when the creating
// *thread* exits, so the child is started from a goroutine locked to its
// thread that stays alive, parked in Wait, for the child's whole life.
func startProc(name, bin string, args, env []string, logPath string, withStdin bool) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	if withStdin {
		w, err := cmd.StdinPipe()
		if err != nil {
			logf.Close()
			return nil, err
		}
		p.stdin = w
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread ends with this goroutine, after the child has exited.
		defer close(p.done)
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to exit (SIGTERM, and EOF on stdin), then kills it
// after grace. It is safe to call more than once.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail returns the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// rss returns the process's resident set size and its peak (VmRSS and
// VmHWM from /proc/<pid>/status), in bytes.
func (p *proc) rss() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, 0, fmt.Errorf("%s rss: %w", p.name, err)
	}
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) != 3 || fields[2] != "kB" {
			continue
		}
		kb, perr := strconv.ParseInt(fields[1], 10, 64)
		if perr != nil {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("%s rss: no VmRSS in /proc/%d/status", p.name, p.pid())
	}
	return rss, peak, nil
}

// waitReady polls probe until it succeeds, the process exits or timeout
// passes.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during startup (%v):\n%s", p.name, p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %w (last probe: %v)\n%s", p.name, timeout, ctx.Err(), last, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// server is a running server process of a system under test.
type server struct {
	*proc
	endpoint string // fenced: base URL; etcd: host:port
}

func startFenced(ctx context.Context, bin, dir string, maxLeases int, env []string, extra ...string) (*server, error) {
	listen, err := testutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	raftListen, err := testutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{
		"--data-dir", data, "--listen", listen, "--raft-listen", raftListen,
		"--log-level", "warn", "--max-leases", strconv.Itoa(maxLeases),
	}, perClientLimits(bin, maxLeases)...)
	p, err := startProc("fenced", bin, append(args, extra...), env, filepath.Join(dir, "fenced.log"), false)
	if err != nil {
		return nil, err
	}
	s := &server{proc: p, endpoint: "http://" + listen}
	if err := p.waitReady(ctx, 60*time.Second, healthz(s.endpoint)); err != nil {
		p.stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// perClientLimits lifts fenced's limits per client address, which the
// harness would hit by design: every benchmark client comes from
// 127.0.0.1, up to 256 of them with a call each in flight and a Session
// stream each (more while the last run's streams end), and the memory
// workload holds all its leases from there (ZooKeeper gets
// maxClientCnxns=0 for the same reason). Builds older than a flag do not
// get it.
func perClientLimits(bin string, maxLeases int) []string {
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	var args []string
	for _, f := range []struct{ flag, value string }{
		{"--max-calls-per-client", "1000000"},
		{"--max-leases-per-client", strconv.Itoa(maxLeases)},
		{"--max-sessions-per-client", "10000"},
	} {
		if bytes.Contains(help, []byte(f.flag+" ")) {
			args = append(args, f.flag, f.value)
		}
	}
	return args
}

func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// fencedLeasesActive reads the fenced_leases_active gauge from /metrics.
func fencedLeasesActive(ctx context.Context, endpoint string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "fenced_leases_active "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, errors.New("no fenced_leases_active in /metrics")
}
