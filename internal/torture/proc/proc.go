package proc

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

// Child is a process the harness starts, and may kill, freeze and start
// again. Its standard error (and standard output, unless OnStdout takes it)
// is appended to LogPath, across restarts.
type Child struct {
	Name     string
	Argv     []string
	LogPath  string
	OnStdout func(line []byte) // called for each line of standard output
	// OnExit, if set, is called after each exit that the harness did not
	// cause (with kill or stop).
	OnExit func(err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	intended bool // the current process is being killed or stopped
	// Env is added to the harness's environment for the child (the
	// failpoints of a node).
	Env []string
}

// Start starts the process; it fails if the process is running.
func (c *Child) Start() error { return c.start(false) }

// StartExpectingExit starts the process with its exit on its own expected
// from the first moment (ExpectExit(true)): a node that must refuse to
// start.
func (c *Child) StartExpectingExit() error { return c.start(true) }

func (c *Child) start(expectExit bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("%s is already running", c.Name)
		}
	}
	logf, err := os.OpenFile(c.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", c.Name, err)
	}
	fmt.Fprintf(logf, "--- torture: starting %s at %s: %s\n", c.Name, time.Now().Format(time.RFC3339Nano), strings.Join(c.Argv, " "))
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	var stdout io.ReadCloser
	if c.OnStdout != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", c.Name, err)
	}
	done := make(chan struct{})
	c.cmd, c.done, c.exitErr, c.intended = cmd, done, nil, expectExit
	go func() {
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.OnStdout(sc.Bytes())
			}
			io.Copy(io.Discard, stdout)
		}
		err := cmd.Wait()
		fmt.Fprintf(logf, "--- torture: %s exited at %s: %v\n", c.Name, time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		c.mu.Lock()
		c.exitErr = err
		intended := c.intended
		c.mu.Unlock()
		close(done)
		if !intended && c.OnExit != nil {
			c.OnExit(err)
		}
	}()
	return nil
}

// Running reports whether the process is alive (frozen counts as alive).
func (c *Child) Running() bool {
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

// Signal sends sig to the running process.
func (c *Child) Signal(sig os.Signal) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s was never started", c.Name)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", c.Name)
	default:
	}
	return cmd.Process.Signal(sig)
}

// exited returns a channel closed when the current process has exited.
func (c *Child) exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.done
}

func (c *Child) intend() { c.ExpectExit(true) }

// ExpectExit says whether an exit of the current process on its own is
// expected (not a crash): a node that refuses to start on a lost disk.
func (c *Child) ExpectExit(expected bool) {
	c.mu.Lock()
	c.intended = expected
	c.mu.Unlock()
}

// Kill sends SIGKILL and waits for the process to be gone.
func (c *Child) Kill() error {
	c.intend()
	err := c.Signal(os.Kill)
	<-c.exited()
	return err
}

// Stop asks the process to finish (SIGCONT, then SIGTERM) and kills it if
// it has not exited after grace. It reports whether the process had to be
// killed.
func (c *Child) Stop(grace time.Duration) (killed bool) {
	if !c.Running() {
		return false
	}
	c.intend()
	_ = c.Signal(SigCont)
	_ = c.Signal(SigTerm)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.exited():
		return false
	case <-t.C:
	}
	_ = c.Kill()
	return true
}

// ExitError is the error of the last exit, nil while running or after a
// clean exit.
func (c *Child) ExitError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitErr
}

// LogExcerpt returns the lines of a child's log from its last "panic:",
// "fatal error:" or data race report on (at most n lines), or its last n
// lines.
func LogExcerpt(path string, n int) string {
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

// ErrUnsupported is the error of a run on a system without the signals
// the harness needs (SignalsSupported false).
var ErrUnsupported = errors.New("the torture harness needs a Unix system (it freezes and kills processes with signals)")
