package store

import "github.com/fencedio/fenced/fence/fencebolt"

// HighestBucket is the bucket holding each scope's highest token, for tests
// that damage the file on purpose.
var HighestBucket = []byte(fencebolt.Bucket)
