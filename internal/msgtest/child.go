package msgtest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
)

// HelperEnv is the environment variable that names a helper process's
// role; a test binary's TestHelperProcess runs that role and nothing else.
const HelperEnv = "FENCEMSG_HELPER"

// Child is a helper process: the test binary running TestHelperProcess in
// one role, talked to by lines on its stdin and stdout.
type Child struct {
	Cmd   *exec.Cmd
	In    io.WriteCloser
	role  string
	lines chan string
}

// StartChild starts the test binary as a helper in role, with env added to
// this process's environment. It is killed when t ends.
func StartChild(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{HelperEnv + "=" + role}, env...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{Cmd: cmd, In: in, role: role, lines: make(chan string, 100)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

// Expect returns the next line of the child that starts with prefix,
// passing the lines before it to other (when set).
func (c *Child) Expect(t testing.TB, prefix string, other func(string)) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("helper %s exited before %q", c.role, prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if other != nil {
				other(l)
			}
		case <-timeout:
			t.Fatalf("no %q from helper %s within 30s", prefix, c.role)
		}
	}
}

// Stop closes the child's stdin, waits for it to exit, and passes its
// remaining lines to other.
func (c *Child) Stop(other func(string)) {
	c.In.Close()
	c.Cmd.Wait()
	for l := range c.lines {
		if other != nil {
			other(l)
		}
	}
}

// ParseOutcome is the inverse of Outcome.String.
func ParseOutcome(s string) (fencemsg.Outcome, bool) {
	for o := fencemsg.Redeliver; o <= fencemsg.Refused; o++ {
		if o.String() == s {
			return o, true
		}
	}
	return 0, false
}

// StaleLine is how a consumer helper reports a stale rejection its guard
// observed; Sink.RecordLine reads it back.
func StaleLine(d fence.Decision) string {
	return "stale " + d.Owner + " " + strconv.FormatUint(d.Presented, 10) + " " + strconv.FormatUint(d.Highest, 10)
}

// OutcomeLine is how a consumer helper reports the outcome of a delivery.
func OutcomeLine(id string, o fencemsg.Outcome, err error) string {
	if err != nil {
		return "outcome " + id + " " + o.String() + " " + err.Error()
	}
	return "outcome " + id + " " + o.String()
}

// RecordLine records a helper's OutcomeLine or StaleLine, and ignores
// other lines.
func (s *Sink) RecordLine(l string) {
	f := strings.Fields(l)
	switch {
	case len(f) >= 3 && f[0] == "outcome":
		if o, ok := ParseOutcome(f[2]); ok {
			s.Record(f[1], o)
		}
	case len(f) == 4 && f[0] == "stale":
		p, _ := strconv.ParseUint(f[2], 10, 64)
		h, _ := strconv.ParseUint(f[3], 10, 64)
		s.AddStale(fence.Decision{Owner: f[1], Presented: p, Highest: h})
	}
}
