package client_test

import (
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
)

// A *client.Lease goes wherever the guards and transports take a lease.
var _ fence.Lease = (*client.Lease)(nil)

// ... and numbers its writes.
var _ fence.Sequencer = (*client.Lease)(nil)
