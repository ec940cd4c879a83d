// Package guarded runs a handler under a fencing guard for the middleware
// packages (fencehttp, fenceconnect), which must all treat a panicking
// handler the same way.
package guarded

import (
	"context"
	"errors"

	"github.com/fencedio/fenced/fence"
)

// errPanicked makes the guard skip recording while a panic from the handler
// is carried past it.
var errPanicked = errors.New("fence: handler panicked")

// Do runs handler inside g.Do for scope and token. ran reports whether the
// guard admitted the request and called handler; handlerErr is what handler
// returned, err what g.Do returned.
//
// A panic in handler is recovered inside g.Do, which then sees an error:
// the guard neither records the token nor unwinds through its locking,
// which need not be panic-safe. Once g.Do has returned, the panic is raised
// again with its original value, for the server's own recovery to handle.
func Do(ctx context.Context, g fence.Guard, scope string, token uint64, handler func(context.Context) error) (ran bool, handlerErr, err error) {
	var (
		panicked bool
		panicVal any
	)
	err = g.Do(ctx, scope, token, func(ctx context.Context) error {
		ran = true
		panicked, panicVal, handlerErr = callRecovering(ctx, handler)
		if panicked {
			return errPanicked
		}
		return handlerErr
	})
	if panicked {
		panic(panicVal)
	}
	return ran, handlerErr, err
}

// callRecovering runs f and reports a panic instead of unwinding. It tells a
// panic from a normal return by a flag, not by recover's value, so that even
// a panic whose value is nil is caught.
func callRecovering(ctx context.Context, f func(context.Context) error) (panicked bool, val any, err error) {
	panicked = true
	defer func() {
		if panicked {
			val = recover()
		}
	}()
	err = f(ctx)
	return false, nil, err
}
