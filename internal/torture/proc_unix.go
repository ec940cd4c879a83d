//go:build unix

package torture

import (
	"os"
	"os/signal"
	"syscall"
)

const signalsSupported = true

var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
	sigTerm os.Signal = syscall.SIGTERM
	// sigSnapshot asks a torture node to take a raft snapshot now.
	sigSnapshot os.Signal = syscall.SIGUSR1
)

func notifySnapshot(c chan<- os.Signal) { signal.Notify(c, sigSnapshot) }
