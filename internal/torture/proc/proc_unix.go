//go:build unix

package proc

import (
	"os"
	"os/signal"
	"syscall"
)

// SignalsSupported reports whether processes can be frozen, resumed and
// told to snapshot with signals.
const SignalsSupported = true

var (
	SigStop os.Signal = syscall.SIGSTOP
	SigCont os.Signal = syscall.SIGCONT
	SigTerm os.Signal = syscall.SIGTERM
	// SigSnapshot asks a torture node to take a raft snapshot now.
	SigSnapshot os.Signal = syscall.SIGUSR1
)

func notifySnapshot(c chan<- os.Signal) { signal.Notify(c, SigSnapshot) }
