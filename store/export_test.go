package store

import "github.com/fencedio/fenced/fence"

// HighestBucket is the bucket holding each scope's highest token, for tests
// that damage the file on purpose.
var HighestBucket = []byte(fence.BoltBucket)
