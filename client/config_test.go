package client

import (
	"reflect"
	"testing"
	"time"
)

// TestValidateDoesNotChangeTheConfig: Validate only checks; the defaults
// are applied by New, on its own copy.
func TestValidateDoesNotChangeTheConfig(t *testing.T) {
	t.Parallel()
	cfg := Config{TTL: 5 * time.Second}
	before := cfg
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Fatalf("Validate changed the config: %+v, was %+v", cfg, before)
	}
	// The checks see the defaults: a TTL so short that the default
	// margins leave nothing is refused although the margins are unset.
	short := Config{TTL: 12 * time.Millisecond}
	if err := short.Validate(); err == nil {
		t.Fatal("Validate accepted a TTL the default DeadlineMargin consumes")
	}
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.TTL != 10*time.Second || c.cfg.Endpoint == "" || c.cfg.Owner == "" || c.cfg.ClockDrift != DefaultClockDrift {
		t.Fatalf("New did not apply the defaults: %+v", c.cfg)
	}
}
