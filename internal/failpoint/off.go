//go:build !fenced_failpoints

package failpoint

// Compiled reports whether this build carries the failpoints.
const Compiled = false

// Enabled reports whether mutant n is switched on: never, in this build.
func Enabled(Name) bool { return false }

// OneIn reports true about once in n calls; never, in this build.
func OneIn(int) bool { return false }

// LosesUnsynced reports whether crashes are simulated power losses: never,
// in this build.
func LosesUnsynced() bool { return false }
