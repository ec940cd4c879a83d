// Package splitbrain shows the split brain of client-go's leader election
// and how a fencing token prevents it, with two electors on a fenced Lock:
// leader A, a child process, is paused (SIGSTOP) between its check of
// leadership and its write, past its lease; B is elected and writes; A
// resumes and its write goes out late. Without a guard on the resource both
// writes land, the older last; with one, A's is refused.
//
// The test of contrib/k8s and examples/splitbrain both run it.
package splitbrain

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencedio/fenced/client"
	fencek8s "github.com/fencedio/fenced/contrib/k8s"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/fencedtest"
	"k8s.io/client-go/tools/leaderelection"
)

// Election is the name both electors campaign for.
const Election = "controllers/orders"

const (
	childEnv    = "FENCED_SPLITBRAIN_CHILD"
	endpointEnv = "FENCED_SPLITBRAIN_ENDPOINT"
	resourceEnv = "FENCED_SPLITBRAIN_RESOURCE"
)

// Write is one write the resource applied.
type Write struct {
	Value string
	Token uint64
}

// Result is what a run saw.
type Result struct {
	// TokenA and TokenB are the two leaders' fencing tokens.
	TokenA, TokenB uint64
	// StatusA is the HTTP status of A's late write, StatusB of B's.
	StatusA, StatusB int
	// Landed are the writes the resource applied, in order.
	Landed []Write
}

// MaybeChild runs leader A and exits if this process was started as A by
// Run; otherwise it returns at once. Call it first in main (or TestMain).
func MaybeChild() {
	if os.Getenv(childEnv) == "" {
		return
	}
	if err := child(); err != nil {
		fmt.Fprintln(os.Stderr, "leader A:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// timing is both electors' client-go timing: a 1s lease (the fenced TTL).
var timing = struct{ lease, renew, retry time.Duration }{time.Second, 500 * time.Millisecond, 100 * time.Millisecond}

// elect runs a client-go elector on lock until ctx ends.
func elect(ctx context.Context, lock *fencek8s.Lock, cb leaderelection.LeaderCallbacks) error {
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: timing.lease, RenewDeadline: timing.renew, RetryPeriod: timing.retry,
		Callbacks: cb, Name: Election,
	})
	if err != nil {
		return err
	}
	go le.Run(ctx)
	return nil
}

// child is leader A. Elected, it checks that it leads, prints "elected
// TOKEN", and then waits for a line on stdin before it writes: Run pauses
// it there. Its stop hook blocks, as in the report of operators that kept
// acting as leaders.
func child() error {
	c, err := client.New(client.Config{Endpoint: os.Getenv(endpointEnv)})
	if err != nil {
		return err
	}
	resource := os.Getenv(resourceEnv)
	lock, err := fencek8s.New(c, Election, "leader-a")
	if err != nil {
		return err
	}
	err = elect(context.Background(), lock, leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			token := lock.Token()
			if ctx.Err() != nil || token == 0 {
				fmt.Println("not leading")
				return
			}
			fmt.Println("elected", token)
			// Leadership checked; now the write. Run stops the process here.
			bufio.NewReader(os.Stdin).ReadString('\n')
			status, err := put(resource, "leader-a", token)
			if err != nil {
				fmt.Println("write failed:", err)
				return
			}
			fmt.Println("wrote", status)
		},
		OnStoppedLeading: func() {
			fmt.Println("stopped leading")
			select {} // a stop hook that never returns
		},
	})
	if err != nil {
		return err
	}
	select {}
}

// put writes value to the resource with the election's scope and token,
// and returns the answer's status.
func put(resource, value string, token uint64) (int, error) {
	req, err := http.NewRequest(http.MethodPut, resource+"/v1/config", strings.NewReader(value))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Fencing-Scope", Election)
	req.Header.Set("Fencing-Token", strconv.FormatUint(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Run plays the scenario against an in-process fenced node and a resource
// on loopback, guarded by fence.Memory or not, and narrates it to log.
func Run(ctx context.Context, guarded bool, log io.Writer) (res Result, err error) {
	tb := &fencedtest.ExampleTB{}
	defer tb.Close()
	defer func() {
		if r := recover(); r != nil { // fencedtest's Fatalf
			err = fmt.Errorf("%v", r)
		}
	}()
	srv := fencedtest.Start(tb)
	rs, err := startResource(guarded)
	if err != nil {
		return res, err
	}
	defer rs.close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	a, err := startLeaderA(ctx, srv.URL, rs.url, log)
	if err != nil {
		return res, err
	}
	defer a.stop()
	line, err := a.next("elected ")
	if err != nil {
		return res, err
	}
	if res.TokenA, err = strconv.ParseUint(line, 10, 64); err != nil {
		return res, err
	}
	fmt.Fprintf(log, "A (pid %d) is elected with token %d and checks that it leads\n", a.cmd.Process.Pid, res.TokenA)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return res, err
	}
	fmt.Fprintf(log, "A is paused (SIGSTOP) before its write; its lease is no longer renewed\n")

	if res.TokenB, res.StatusB, err = leadB(ctx, srv.URL, rs.url); err != nil {
		return res, err
	}
	fmt.Fprintf(log, "fenced expired A's lease; B is elected with token %d and writes: %d %s\n", res.TokenB, res.StatusB, http.StatusText(res.StatusB))

	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return res, err
	}
	fmt.Fprintln(a.stdin, "write")
	if line, err = a.next("wrote "); err != nil {
		return res, err
	}
	if res.StatusA, err = strconv.Atoi(line); err != nil {
		return res, err
	}
	fmt.Fprintf(log, "A resumes and writes with token %d: %d %s\n", res.TokenA, res.StatusA, http.StatusText(res.StatusA))
	res.Landed = rs.writes()
	return res, nil
}

// resource is the HTTP resource both leaders write to: it records each
// write it applies.
type resource struct {
	url    string
	server *http.Server
	mu     sync.Mutex
	landed []Write
}

// startResource serves a resource on loopback, behind fencehttp's
// middleware with a fence.Memory guard when guarded.
func startResource(guarded bool) (*resource, error) {
	rs := &resource{}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		token, _ := strconv.ParseUint(r.Header.Get("Fencing-Token"), 10, 64)
		rs.mu.Lock()
		rs.landed = append(rs.landed, Write{Value: string(body), Token: token})
		rs.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	if guarded {
		h = fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), fencehttp.Config{})(h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rs.url, rs.server = "http://"+ln.Addr().String(), &http.Server{Handler: h}
	go rs.server.Serve(ln)
	return rs, nil
}

func (rs *resource) close() { rs.server.Close() }

// writes returns the writes applied so far, in order.
func (rs *resource) writes() []Write {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]Write(nil), rs.landed...)
}

// leaderA is leader A's process (see child) and what it prints.
type leaderA struct {
	cmd   *exec.Cmd
	stdin io.Writer
	lines chan string
	ctx   context.Context
	log   io.Writer
}

// startLeaderA starts this executable as leader A, electing on the fenced
// node at endpoint and writing to resourceURL.
func startLeaderA(ctx context.Context, endpoint, resourceURL string, log io.Writer) (*leaderA, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), childEnv+"=1", endpointEnv+"="+endpoint, resourceEnv+"="+resourceURL)
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &leaderA{cmd: cmd, stdin: stdin, lines: make(chan string, 10), ctx: ctx, log: log}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			a.lines <- s.Text()
		}
		close(a.lines)
	}()
	return a, nil
}

// next waits for A's next line that starts with prefix and returns the rest
// of it; it narrates the lines it skips.
func (a *leaderA) next(prefix string) (string, error) {
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				return "", errors.New("leader A exited")
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest, nil
			}
			fmt.Fprintln(a.log, "  A says:", l)
		case <-a.ctx.Done():
			return "", fmt.Errorf("waiting for leader A to say %q: %w", prefix, a.ctx.Err())
		}
	}
}

// stop ends A, paused or not.
func (a *leaderA) stop() {
	a.cmd.Process.Signal(syscall.SIGCONT)
	a.cmd.Process.Kill()
	a.cmd.Wait()
}

// leadB elects leader B in this process and returns its token and the
// status of its write, once it has written.
func leadB(ctx context.Context, endpoint, resourceURL string) (token uint64, status int, err error) {
	c, err := client.New(client.Config{Endpoint: endpoint})
	if err != nil {
		return 0, 0, err
	}
	lock, err := fencek8s.New(c, Election, "leader-b")
	if err != nil {
		return 0, 0, err
	}
	type wrote struct {
		token  uint64
		status int
		err    error
	}
	done := make(chan wrote, 1)
	err = elect(ctx, lock, leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			token := lock.Token()
			status, err := put(resourceURL, "leader-b", token)
			done <- wrote{token, status, err}
		},
		OnStoppedLeading: func() {},
	})
	if err != nil {
		return 0, 0, err
	}
	select {
	case b := <-done:
		return b.token, b.status, b.err
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("waiting for B to be elected: %w", ctx.Err())
	}
}
