//go:build !unix

package raftlog

// lockDir does not lock on systems without flock: only one fenced process
// may use a data directory at a time, and there nothing enforces it.
func lockDir(string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
