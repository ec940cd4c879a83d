package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/fencedio/fenced/client"
)

// runUnderLease runs argv while l is held. The command runs in its own
// process group so that SIGTERM and SIGKILL reach its children too.
func runUnderLease(ctx context.Context, l *client.Lease, argv []string, killAfter time.Duration) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"FENCING_TOKEN="+strconv.FormatUint(l.Token(), 10),
		"FENCING_SCOPE="+l.Key(),
		"FENCING_LEASE_ID="+l.ID(),
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		release(l)
		return startStatus(argv[0], err)
	}
	// Signals sent to fencectl are passed on to the command, which decides
	// when to stop; the lease is released once it has.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	group := -cmd.Process.Pid

	for {
		select {
		case sig := <-sigs:
			syscall.Kill(group, sig.(syscall.Signal))
		case err := <-exited:
			release(l)
			return commandStatus(err)
		case <-l.Done():
			fmt.Fprintf(os.Stderr, "fencectl: lease on %q lost (%v); sending SIGTERM to %s\n", l.Key(), l.Err(), argv[0])
			syscall.Kill(group, syscall.SIGTERM)
			select {
			case <-exited:
				return &exitError{code: exitLost, err: fmt.Errorf("lease lost; %s stopped after SIGTERM: %w", argv[0], l.Err())}
			case <-time.After(killAfter):
				syscall.Kill(group, syscall.SIGKILL)
				<-exited
				return &exitError{code: exitKilled, err: fmt.Errorf("lease lost; %s killed with SIGKILL after %v: %w", argv[0], killAfter, l.Err())}
			}
		}
	}
}

func release(l *client.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "fencectl: release %q: %v\n", l.Key(), err)
	}
}

// commandStatus turns the command's exit into fencectl's.
func commandStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
		return &exitError{code: code, err: fmt.Errorf("command exited: %w", err)}
	}
	return err
}

// startStatus is fencectl's exit when the command could not be started, as
// env(1) and timeout(1) have it: 127 when it was not found, 126 when it was
// found but could not be run (not executable, a directory, a bad format).
func startStatus(name string, err error) error {
	code := exitCannotRun
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	return &exitError{code: code, err: fmt.Errorf("run %s: %w", name, err)}
}

// exitHeld is acquire's default exit status when the key is held by
// someone else (--conflict-exit-code changes it).
const exitHeld = 2

// Exit statuses of acquire when the command cannot be started (those of
// env and timeout).
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// Exit statuses of acquire when the lease is lost (sysexits' EX_TEMPFAIL and
// the one after it).
const (
	exitLost   = 75 // lost; the command, if any, stopped after SIGTERM
	exitKilled = 76 // lost; the command had to be killed with SIGKILL
)
