// Command etcdnode runs one etcd member (go.etcd.io/etcd/server/v3 embed),
// alone or in a cluster given with --initial-cluster, with its default
// durability settings, fsync included, for the fencedbench comparison. It listens only on the loopback URLs it is given
// and exits when its standard input closes, so it cannot outlive the harness
// that started it, even one that was killed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdnode:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		dataDir   = flag.String("data-dir", "", "data directory (required)")
		clientURL = flag.String("client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise (loopback only)")
		peerURL   = flag.String("peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise (loopback only)")
		name      = flag.String("name", "bench", "member name")
		initial   = flag.String("initial-cluster", "", "name=peerURL,... of every member (default: this member alone)")
		logLevel  = flag.String("log-level", "warn", "etcd log level")
		watchIn   = flag.Bool("exit-on-stdin-eof", true, "exit when standard input reaches EOF")
	)
	flag.Parse()
	if *dataDir == "" {
		return errors.New("--data-dir is required")
	}
	cu, err := loopbackURL(*clientURL)
	if err != nil {
		return fmt.Errorf("--client-url: %w", err)
	}
	pu, err := loopbackURL(*peerURL)
	if err != nil {
		return fmt.Errorf("--peer-url: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if *initial != "" {
		for _, m := range strings.Split(*initial, ",") {
			_, u, ok := strings.Cut(m, "=")
			if _, err := loopbackURL(u); !ok || err != nil {
				return fmt.Errorf("--initial-cluster: member %q is not name=loopback URL", m)
			}
		}
		cfg.InitialCluster = *initial
	}
	cfg.LogLevel = *logLevel
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return errors.New("etcd did not become ready within 60s")
	}
	fmt.Println("ready")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	eof := make(chan struct{})
	if *watchIn {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
	}
	select {
	case <-sigs:
	case <-eof:
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// loopbackURL refuses anything but an http URL on a loopback IP, so the
// benchmark never listens beyond this machine.
func loopbackURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(u.Hostname())
	if u.Scheme != "http" || ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%q is not an http URL on a loopback IP", s)
	}
	return u, nil
}
