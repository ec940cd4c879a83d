// Command splitbrain shows client-go's split brain and its prevention by a
// fencing token. Two client-go electors campaign through fenced Locks: A,
// a child process, is elected, checks that it leads and is paused (SIGSTOP)
// before its write, past its 1s lease; B is elected and writes; A resumes
// and writes late. It runs twice: against a resource without a guard, where
// both writes land and A's stale one wins, then behind fencehttp's
// middleware with a fence.Memory guard, where A's write is refused with 409.
//
//	cd contrib/k8s && go run ./examples/splitbrain
//
// It starts its own fenced node in-process; no Kubernetes API server is
// involved: client-go's elector only talks to its lock.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/fencedio/fenced/contrib/k8s/internal/splitbrain"
)

func main() {
	splitbrain.MaybeChild()
	for _, guarded := range []bool{false, true} {
		fmt.Printf("== resource %s\n", map[bool]string{false: "without a guard", true: "behind a fencing guard"}[guarded])
		res, err := splitbrain.Run(context.Background(), guarded, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "splitbrain:", err)
			os.Exit(1)
		}
		fmt.Printf("writes applied, in order:")
		for _, w := range res.Landed {
			fmt.Printf(" %s (token %d)", w.Value, w.Token)
		}
		fmt.Println()
		if len(res.Landed) > 1 {
			fmt.Println("split brain: both leaders' writes landed, the stale one last")
		} else {
			fmt.Println("fenced: only the current leader's write landed")
		}
	}
}
