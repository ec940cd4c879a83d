package proc

import "syscall"

// sysProcAttr puts each child in its own process group, so that a Ctrl-C
// in the terminal reaches only the harness, which then stops the children
// in order, and makes the kernel kill the child if the harness dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
