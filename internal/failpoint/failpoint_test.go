package failpoint

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(" expire-half-ttl,,grant-held ")
	if err != nil || !slices.Equal(got, []Name{ExpireHalfTTL, GrantHeld}) {
		t.Errorf("Parse = %v, %v", got, err)
	}
	if _, err := Parse("expire-half-tll"); err == nil {
		t.Error("a misspelt mutant was accepted")
	}
}

// TestCheck: a mutant asked of a build that cannot run it is an error,
// never a silent pass.
func TestCheck(t *testing.T) {
	t.Setenv(EnvVar, "")
	if err := Check(); err != nil {
		t.Errorf("no mutants: %v", err)
	}
	t.Setenv(EnvVar, string(RenewNoExtend))
	if err := Check(); (err == nil) != Compiled {
		t.Errorf("Compiled=%v, Check() = %v", Compiled, err)
	}
	t.Setenv(EnvVar, "no-such-mutant")
	if err := Check(); err == nil {
		t.Error("an unknown mutant passed Check")
	}
}

// TestDisabledWithoutTag: the untagged build carries no mutant.
func TestDisabledWithoutTag(t *testing.T) {
	if Compiled {
		t.Skip("built with fenced_failpoints")
	}
	for _, n := range All {
		if Enabled(n) {
			t.Errorf("%s enabled without the tag", n)
		}
	}
}
