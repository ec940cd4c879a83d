//go:build fenced_failpoints

package failpoint

import (
	"math/rand/v2"
	"os"
)

// Compiled reports whether this build carries the failpoints.
const Compiled = true

var active = func() map[Name]bool {
	m := map[Name]bool{}
	names, _ := Parse(os.Getenv(EnvVar)) // Check reports the error
	for _, n := range names {
		m[n] = true
	}
	return m
}()

// Enabled reports whether mutant n is switched on for this process.
func Enabled(n Name) bool { return active[n] }

// OneIn reports true about once in n calls.
func OneIn(n int) bool { return rand.IntN(n) == 0 }

// loseUnsynced is read once at start, like the mutants.
var loseUnsynced = os.Getenv(LoseUnsyncedEnvVar) == "1"

// LosesUnsynced reports whether crashes of this process are simulated
// power losses (see package failstore).
func LosesUnsynced() bool { return loseUnsynced }
