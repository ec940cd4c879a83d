//go:build !unix

package torture

import (
	"os"
	"syscall"
)

const signalsSupported = false

var (
	sigStop os.Signal = os.Kill
	sigCont os.Signal = os.Kill
	sigTerm os.Signal = os.Kill
	// sigSnapshot is never sent: runs need signals.
	sigSnapshot os.Signal = os.Interrupt
)

func notifySnapshot(chan<- os.Signal) {}

func sysProcAttr() *syscall.SysProcAttr { return nil }
