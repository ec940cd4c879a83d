package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencedio/fenced/internal/httplimit"
	"github.com/fencedio/fenced/server"
	"github.com/spf13/pflag"
)

// registerLimitFlags adds the flags of the server's load limits and quotas;
// their defaults are documented on server.Config.
func registerLimitFlags(f *pflag.FlagSet, cfg *server.Config) {
	f.DurationVar(&cfg.ApplyStallTimeout, "apply-stall-timeout", server.DefaultApplyStallTimeout,
		"/healthz answers 503 when log writes are pending this long without progress")
	f.IntVar(&cfg.MaxWatchers, "max-watchers", server.DefaultMaxWatchers, "open Watch streams allowed on this server")
	f.IntVar(&cfg.MaxWatchersPerClient, "max-watchers-per-client", server.DefaultMaxWatchersPerClient, "open Watch streams allowed from one client IP")
	f.IntVar(&cfg.MaxSessions, "max-sessions", server.DefaultMaxSessions, "open Session streams allowed on this server")
	f.IntVar(&cfg.MaxSessionsPerClient, "max-sessions-per-client", server.DefaultMaxSessionsPerClient, "open Session streams allowed from one client IP")
	f.IntVar(&cfg.MaxEventSubscribers, "max-event-subscribers", server.DefaultMaxEventSubscribers, "open dashboard streams (/v1/events) allowed on this server")
	f.IntVar(&cfg.MaxEventSubscribersPerClient, "max-event-subscribers-per-client", server.DefaultMaxEventSubscribersPerClient, "open dashboard streams allowed from one client IP")
	f.DurationVar(&cfg.StreamWriteTimeout, "stream-write-timeout", server.DefaultStreamWriteTimeout,
		"cut off a Watch or dashboard subscriber that takes longer than this to accept one send")
	f.IntVar(&cfg.StreamUnackedBytes, "stream-unacked-bytes", server.DefaultStreamUnackedBytes,
		"send RESYNC and end a Watch or dashboard stream whose connection holds more bytes than this unacknowledged by its client (Linux)")
	f.Float64Var(&cfg.ReadShare, "read-share", server.DefaultReadShare,
		"share of time each read slot may spend on Gets, Lists and dashboard snapshots while writes wait (1: no limit)")
	f.Float64Var(&cfg.FanoutShare, "fanout-share", server.DefaultFanoutShare,
		"share of time each fan-out slot may spend sending to watchers and dashboards while writes wait (1: no limit)")
	f.IntVar(&cfg.MaxLeasesPerOwner, "max-leases-per-owner", server.DefaultMaxLeasesPerOwner, "refuse new leases for an owner holding this many (resource_exhausted)")
	f.IntVar(&cfg.MaxWaitersPerOwner, "max-waiters-per-owner", server.DefaultMaxWaitersPerOwner, "refuse waiting acquisitions beyond this many per owner (resource_exhausted)")
	f.IntVar(&cfg.MaxWaiters, "max-waiters", 0,
		"refuse waiting acquisitions beyond this many on this server (resource_exhausted; 0: as many as fit in an eighth of the memory, at about 40 KiB each)")
	f.IntVar(&cfg.MaxWaitersPerClient, "max-waiters-per-client", 0,
		"refuse waiting acquisitions beyond this many from one client IP (resource_exhausted; 0: a tenth of --max-waiters, at least 1000)")
	f.IntVar(&cfg.MaxLeasesPerClient, "max-leases-per-client", 0,
		"refuse new leases for a client IP holding this many (resource_exhausted; 0: a tenth of --max-leases, at least 1000)")
	f.IntVar(&cfg.MaxCallsPerClient, "max-calls-per-client", server.DefaultMaxCallsPerClient,
		"API calls (unary, and those Session streams carry) from one client IP worked on at once; more are refused (resource_exhausted; waiting in line for a key does not count)")
	f.IntVar(&cfg.NetworkShare, "network-share", server.DefaultNetworkShare,
		"a client network (see --client-network-v4, -v6) may take this many times each per-client share (calls, waiters, leases, streams)")
	f.IntVar(&cfg.MaxCallsInProgress, "max-calls-in-progress", server.DefaultMaxCallsInProgress,
		"API calls (unary, and those Session streams carry) worked on at once from all clients; more wait, in turns by client network (weighted-fair: the network that used the server least goes first)")
	f.IntVar(&cfg.ClientNetworkV4, "client-network-v4", server.DefaultClientNetworkV4,
		"prefix length grouping IPv4 client addresses into one network for shares and turns (32: each address its own)")
	f.IntVar(&cfg.ClientNetworkV6, "client-network-v6", server.DefaultClientNetworkV6,
		"prefix length grouping IPv6 client addresses into one network for shares and turns (128: each address its own)")
	registerHTTPFlags(f, &cfg.MaxHeaderBytes, &cfg.IdleTimeout, &cfg.BodyReadTimeout, &cfg.MaxConns, &cfg.MaxConnsPerClient)
}

// registerHTTPFlags adds the HTTP server limits shared by fenced and fenced
// store.
func registerHTTPFlags(f *pflag.FlagSet, maxHeaderBytes *int, idle, body *time.Duration, maxConns, maxConnsPerClient *int) {
	f.IntVar(maxHeaderBytes, "max-header-bytes", httplimit.DefaultMaxHeaderBytes, "largest request header block accepted (431 above; also the HTTP/2 header list size)")
	f.DurationVar(idle, "idle-timeout", httplimit.DefaultIdleTimeout, "close keep-alive connections idle this long")
	f.DurationVar(body, "body-read-timeout", httplimit.DefaultBodyTimeout, "fail a request body not received within this time (streams exempt)")
	f.IntVar(maxConns, "max-conns", 0, "open connections allowed (0: three quarters of the file descriptor limit)")
	f.IntVar(maxConnsPerClient, "max-conns-per-client", 0,
		"open connections allowed from one client IP; more are closed unanswered (0: a tenth of --max-conns, at least 64)")
}

// byteSize is a flag of bytes: a count, or one with a binary suffix (KiB,
// MiB, GiB), as in 64MiB.
type byteSize int64

var sizeSuffixes = []struct {
	suffix string
	shift  uint
}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}}

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range sizeSuffixes {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)>>shift {
		return fmt.Errorf("%q is not a size in bytes: a count, or one with KiB, MiB or GiB", s)
	}
	*b = byteSize(n << shift)
	return nil
}

func (b *byteSize) String() string {
	for i := len(sizeSuffixes) - 1; i >= 0; i-- {
		if u := sizeSuffixes[i]; *b != 0 && int64(*b)%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(*b)>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (*byteSize) Type() string { return "bytes" }
