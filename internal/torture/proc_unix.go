//go:build unix

package torture

import (
	"os"
	"syscall"
)

const signalsSupported = true

var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
	sigTerm os.Signal = syscall.SIGTERM
)
