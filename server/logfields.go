package server

import (
	"crypto/sha256"
	"encoding/hex"
)

// idFingerprint is how log records name a lease: the first 8 hex digits of
// the SHA-256 of its ID, in the field lease_id. The ID itself renews and
// releases the lease (invariant I4), so it never goes into a log, where
// anyone who reads the logs could use it; the fingerprint lets an operator
// tie the records of one lease together, and a holder who knows its ID can
// compute it to find its own records. It cannot be turned back into the ID.
func idFingerprint(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:4])
}
