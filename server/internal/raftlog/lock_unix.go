//go:build unix

package raftlog

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path, creating it if needed. The
// kernel drops the lock when the process exits, however it exits, so a
// crash never leaves the directory locked.
func lockDir(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrDataDirInUse
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return f.Close, nil
}
