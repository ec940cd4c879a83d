package server

import (
	"testing"
	"time"
)

// TestValidateDoesNotChangeTheConfig: Validate only checks, seeing the
// defaults New will apply; New applies them to its own copy.
func TestValidateDoesNotChangeTheConfig(t *testing.T) {
	var cfg Config
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "" || cfg.MinTTL != 0 || cfg.Logger != nil || cfg.Registerer != nil || cfg.Gatherer != nil {
		t.Fatalf("Validate changed the config: %+v", cfg)
	}
	// The default MinTTL (1s) against a HeartbeatTimeout of 3s breaks the
	// rule that a lease outlives a leadership check.
	slow := Config{HeartbeatTimeout: 3 * time.Second}
	if err := slow.Validate(); err == nil {
		t.Fatal("Validate did not check the default MinTTL against HeartbeatTimeout")
	}
	d := Config{}.WithDefaults()
	if d.DataDir != DefaultDataDir || d.MinTTL != time.Second || d.Logger == nil || d.Registerer == nil || d.Gatherer == nil {
		t.Fatalf("withDefaults left zero fields: %+v", d)
	}
}
