package torture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// child is a process the harness starts, and may kill, freeze and start
// again. Its standard error (and standard output, unless onStdout takes it)
// is appended to logPath, across restarts.
type child struct {
	name     string
	argv     []string
	logPath  string
	onStdout func(line []byte) // called for each line of standard output
	// onExit, if set, is called after each exit that the harness did not
	// cause (with kill or stop).
	onExit func(err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	intended bool // the current process is being killed or stopped
	// env is added to the harness's environment for the child (the
	// failpoints of a node).
	env []string
}

func (c *child) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("%s is already running", c.name)
		}
	}
	logf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", c.name, err)
	}
	fmt.Fprintf(logf, "--- torture: starting %s at %s: %s\n", c.name, time.Now().Format(time.RFC3339Nano), strings.Join(c.argv, " "))
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	if len(c.env) > 0 {
		cmd.Env = append(os.Environ(), c.env...)
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	var stdout io.ReadCloser
	if c.onStdout != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return fmt.Errorf("%s: %w", c.name, err)
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	done := make(chan struct{})
	c.cmd, c.done, c.exitErr, c.intended = cmd, done, nil, false
	go func() {
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.onStdout(sc.Bytes())
			}
			io.Copy(io.Discard, stdout)
		}
		err := cmd.Wait()
		fmt.Fprintf(logf, "--- torture: %s exited at %s: %v\n", c.name, time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		c.mu.Lock()
		c.exitErr = err
		intended := c.intended
		c.mu.Unlock()
		close(done)
		if !intended && c.onExit != nil {
			c.onExit(err)
		}
	}()
	return nil
}

// running reports whether the process is alive (frozen counts as alive).
func (c *child) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *child) signal(sig os.Signal) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", c.name)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", c.name)
	default:
	}
	return cmd.Process.Signal(sig)
}

// exited returns a channel closed when the current process has exited.
func (c *child) exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.done
}

func (c *child) intend() { c.expectExit(true) }

// expectExit says whether an exit of the current process on its own is
// expected (not a crash): a node that refuses to start on a lost disk.
func (c *child) expectExit(expected bool) {
	c.mu.Lock()
	c.intended = expected
	c.mu.Unlock()
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() error {
	c.intend()
	err := c.signal(os.Kill)
	<-c.exited()
	return err
}

// stop asks the process to finish (SIGCONT, then SIGTERM) and kills it if
// it has not exited after grace. It reports whether the process had to be
// killed.
func (c *child) stop(grace time.Duration) (killed bool) {
	if !c.running() {
		return false
	}
	c.intend()
	_ = c.signal(sigCont)
	_ = c.signal(sigTerm)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.exited():
		return false
	case <-t.C:
	}
	_ = c.kill()
	return true
}

// exitError is the error of the last exit, nil while running or after a
// clean exit.
func (c *child) exitError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitErr
}

// logExcerpt returns the lines of a child's log from its last "panic:",
// "fatal error:" or data race report on (at most n lines), or its last n
// lines.
func logExcerpt(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	start := max(0, len(lines)-n)
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic:") || strings.HasPrefix(lines[i], "fatal error:") ||
			strings.HasPrefix(lines[i], "WARNING: DATA RACE") {
			start = i
			break
		}
	}
	return strings.Join(lines[start:min(len(lines), start+n)], "\n")
}

var errUnsupported = errors.New("the torture harness needs a Unix system (it freezes and kills processes with signals)")
