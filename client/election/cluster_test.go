package election_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/client/election"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/testutil"
)

// node is a fenced process of a test cluster.
type node struct {
	url string
	cmd *exec.Cmd
}

// startCluster builds fenced and starts a cluster of three processes.
func startCluster(t *testing.T) []*node {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fenced")
	if out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin,
		"github.com/fencedio/fenced/cmd/fenced").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var ic []string
	apis := make([]string, 3)
	for i := range apis {
		apis[i] = testutil.MustFreeAddr(t)
		ic = append(ic, fmt.Sprintf("n%d=%s", i+1, testutil.MustFreeAddr(t)))
	}
	nodes := make([]*node, 3)
	for i, api := range apis {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--node-id", fmt.Sprintf("n%d", i+1), "--initial-cluster", strings.Join(ic, ","),
			"--listen", api, "--data-dir", filepath.Join(dir, fmt.Sprintf("data-n%d", i+1)))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
		nodes[i] = &node{url: "http://" + api, cmd: cmd}
	}
	return nodes
}

// leader waits for a live node that leads and serves acquisitions, and
// returns its index.
func leader(t *testing.T, nodes []*node) int {
	t.Helper()
	found := -1
	testutil.Eventually(t, 30*time.Second, func() error {
		for i, n := range nodes {
			if n == nil {
				continue
			}
			resp, err := http.Get(n.url + "/v1/role")
			if err != nil {
				continue
			}
			var r struct {
				Role  string `json:"role"`
				Ready bool   `json:"ready"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err == nil && r.Role == "leader" && r.Ready {
				found = i
				return nil
			}
		}
		return errors.New("no leader")
	})
	return found
}

// The elected process keeps its leadership while the cluster's leader is
// killed (SIGKILL) and another takes over, as every lease does; a waiting candidate
// and an observer carry on through the failover, and the next leader gets
// a higher token.
func TestClusterFailover(t *testing.T) {
	testenv.SkipUnlessLong(t)
	nodes := startCluster(t)
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url)
	}
	leader(t, nodes)
	const ttl = 5 * time.Second
	c, err := client.New(client.Config{Endpoints: urls, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e := election.New(c)
	ctx := context.Background()

	a, err := e.Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []election.Leader
	)
	octx, stop := context.WithCancel(ctx)
	observed := make(chan error, 1)
	go func() {
		observed <- e.Observe(octx, "svc", func(l election.Leader) error {
			mu.Lock()
			seen = append(seen, l)
			mu.Unlock()
			return nil
		})
	}()
	b := campaign(ctx, e, "svc", "b")

	old := leader(t, nodes)
	if err := nodes[old].cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	nodes[old] = nil
	leader(t, nodes)
	// Several renewal periods pass across the new raft leader.
	select {
	case <-a.Done():
		t.Fatalf("leadership lost in the failover: %v", a.Err())
	case r := <-b:
		t.Fatalf("b elected while a leads: %+v", r)
	case <-time.After(2 * ttl):
	}
	if got, err := e.Leader(ctx, "svc"); err != nil || got != (election.Leader{Value: "a", Token: a.Token()}) {
		t.Fatalf("Leader after the failover = %+v, %v; want a with token %d", got, err, a.Token())
	}

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Resign(ctx)
	if r.l.Token() <= a.Token() {
		t.Fatalf("b's token %d is not above a's %d", r.l.Token(), a.Token())
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 2 && seen[0].Value == "a" && seen[1] == (election.Leader{Value: "b", Token: r.l.Token()}) {
			return nil
		}
		return errors.New("observer has not seen a then b")
	})
	stop()
	if err := <-observed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Observe: %v", err)
	}
}
