//go:build unix

package proc

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
	crash := &Child{
		Name:    "crasher",
		Argv:    []string{"sh", "-c", "echo starting >&2; echo 'panic: boom' >&2; echo 'goroutine 1' >&2; exit 2"},
		LogPath: filepath.Join(dir, "crasher.log"),
		OnExit:  func(err error) { exits <- err },
	}
	if err := crash.Start(); err != nil {
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
	if ex := LogExcerpt(crash.LogPath, 2); ex != "panic: boom\ngoroutine 1" {
		t.Errorf("excerpt = %q, want the panic and the line after it", ex)
	}

	ready := make(chan struct{}, 1)
	sleeper := &Child{
		Name:     "sleeper",
		Argv:     []string{"sh", "-c", "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"},
		LogPath:  filepath.Join(dir, "sleeper.log"),
		OnExit:   func(err error) { exits <- err },
		OnStdout: func([]byte) { ready <- struct{}{} },
	}
	for _, stop := range []func() bool{
		func() bool { return sleeper.Kill() != nil },
		func() bool { return sleeper.Stop(10 * time.Second) },
		func() bool { _ = sleeper.Signal(SigStop); return sleeper.Stop(10 * time.Second) }, // frozen: resumed first
	} {
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready: // the shell has installed its trap
		case <-time.After(10 * time.Second):
			t.Fatal("sleeper never said ready")
		}
		if !sleeper.Running() {
			t.Fatal("sleeper not running")
		}
		if failed := stop(); failed {
			t.Error("stop failed or had to kill")
		}
		if sleeper.Running() {
			t.Error("sleeper still running")
		}
	}
	select {
	case err := <-exits:
		t.Errorf("an exit caused by the harness was reported: %v", err)
	default:
	}
	log, _ := os.ReadFile(sleeper.LogPath)
	if n := strings.Count(string(log), "--- torture: starting sleeper"); n != 3 {
		t.Errorf("log shows %d starts, want 3 (appended across restarts)", n)
	}
}
