//go:build unix

package torture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChildReportsOnlyExitsTheHarnessDidNotCause(t *testing.T) {
	dir := t.TempDir()
	exits := make(chan error, 4)
	crash := &child{
		name:    "crasher",
		argv:    []string{"sh", "-c", "echo starting >&2; echo 'panic: boom' >&2; echo 'goroutine 1' >&2; exit 2"},
		logPath: filepath.Join(dir, "crasher.log"),
		onExit:  func(err error) { exits <- err },
	}
	if err := crash.start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exits:
		if err == nil {
			t.Fatal("crash reported without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("crash not reported")
	}
	if ex := logExcerpt(crash.logPath, 2); ex != "panic: boom\ngoroutine 1" {
		t.Errorf("excerpt = %q, want the panic and the line after it", ex)
	}

	ready := make(chan struct{}, 1)
	sleeper := &child{
		name:     "sleeper",
		argv:     []string{"sh", "-c", "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"},
		logPath:  filepath.Join(dir, "sleeper.log"),
		onExit:   func(err error) { exits <- err },
		onStdout: func([]byte) { ready <- struct{}{} },
	}
	for _, stop := range []func() bool{
		func() bool { return sleeper.kill() != nil },
		func() bool { return sleeper.stop(10 * time.Second) },
		func() bool { _ = sleeper.signal(sigStop); return sleeper.stop(10 * time.Second) }, // frozen: resumed first
	} {
		if err := sleeper.start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready: // the shell has installed its trap
		case <-time.After(10 * time.Second):
			t.Fatal("sleeper never said ready")
		}
		if !sleeper.running() {
			t.Fatal("sleeper not running")
		}
		if failed := stop(); failed {
			t.Error("stop failed or had to kill")
		}
		if sleeper.running() {
			t.Error("sleeper still running")
		}
	}
	select {
	case err := <-exits:
		t.Errorf("an exit caused by the harness was reported: %v", err)
	default:
	}
	log, _ := os.ReadFile(sleeper.logPath)
	if n := strings.Count(string(log), "--- torture: starting sleeper"); n != 3 {
		t.Errorf("log shows %d starts, want 3 (appended across restarts)", n)
	}
}
