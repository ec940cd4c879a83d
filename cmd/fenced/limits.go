package main

import (
	"time"

	"github.com/fencedio/fenced/server"
	"github.com/spf13/pflag"
)

// registerLimitFlags adds the flags of the server's load limits and quotas;
// their defaults are documented on server.Config.
func registerLimitFlags(f *pflag.FlagSet, cfg *server.Config) {
	f.DurationVar(&cfg.ApplyStallTimeout, "apply-stall-timeout", 10*time.Second,
		"/healthz answers 503 when log writes are pending this long without progress")
}
