package httplimit

import (
	"testing"
	"time"
)

// TestLimitsDefaultsAndValidate: WithDefaults fills only zero fields,
// Validate refuses negative values and changes nothing.
func TestLimitsDefaultsAndValidate(t *testing.T) {
	l := Limits{IdleTimeout: time.Second}
	d := l.WithDefaults()
	if l != (Limits{IdleTimeout: time.Second}) {
		t.Errorf("WithDefaults changed its receiver: %+v", l)
	}
	if d.IdleTimeout != time.Second || d.MaxHeaderBytes != 64<<10 || d.ReadHeaderTimeout != 10*time.Second ||
		d.BodyTimeout != 30*time.Second || d.MaxConns != DefaultMaxConns() {
		t.Errorf("WithDefaults = %+v", d)
	}
	if err := l.Validate(); err != nil {
		t.Errorf("Validate(%+v): %v", l, err)
	}
	bad := Limits{BodyTimeout: -time.Second}
	if err := bad.Validate(); err == nil {
		t.Error("a negative BodyTimeout was accepted")
	}
	if bad != (Limits{BodyTimeout: -time.Second}) {
		t.Errorf("Validate changed its receiver: %+v", bad)
	}
}
