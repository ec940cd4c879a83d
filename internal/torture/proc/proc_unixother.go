//go:build unix && !linux

package proc

import "syscall"

// sysProcAttr puts each child in its own process group, so that a Ctrl-C
// in the terminal reaches only the harness. Without Pdeathsig, children of
// a harness that is itself killed outlive it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
