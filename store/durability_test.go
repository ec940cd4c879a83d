package store_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/store"
)

const helperDirEnv = "FENCED_STORE_HELPER_DIR"

// TestHelperStoreProcess is not a test: the durability test runs the test
// binary again with this test selected, to serve a store from a process it
// can kill.
func TestHelperStoreProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		return
	}
	s, err := store.Open(store.Config{
		DataDir: dir,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	err = s.Serve(context.Background(), ln) // until killed
	fmt.Fprintln(os.Stderr, "serve:", err)
	os.Exit(2)
}

// op is one write of a durability writer. Writer w owns object obj-w and
// scope scope-w and presents tokens 1, 2, 3, ... so the expected state after
// each acknowledged op is known.
type op struct {
	token uint64
	del   bool
	value string
	seq   string // Audit-Seq of the acknowledgement
}

func (o op) state() (present bool, value string) { return !o.del, o.value }

func TestDurabilityAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a subprocess")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperStoreProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		cmd.Process.Kill()
		cmd.Wait()
		waited = true
		t.Fatalf("helper did not announce its address: %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	base := "http://" + addr

	// No keep-alive: a request is never retried on a reused connection, so
	// each op reaches the server at most once.
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true},
	}

	const writers, killAfter = 4, 80
	var (
		mu     sync.Mutex
		acks   int
		killed = make(chan struct{})
	)
	acked := make([][]op, writers)
	inFlight := make([]*op, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := uint64(1); ; i++ {
				o := op{token: i, del: i%5 == 0, value: fmt.Sprintf("w%d-%d", w, i)}
				method, body := http.MethodPut, strings.NewReader(o.value)
				if o.del {
					method, body, o.value = http.MethodDelete, strings.NewReader(""), ""
				}
				req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s/v1/objects/obj-%d", base, w), body)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header = fencing(fmt.Sprintf("scope-%d", w), tok(i))
				resp, err := client.Do(req)
				if err != nil {
					select {
					case <-killed:
						inFlight[w] = &o // may or may not have been applied
					default:
						t.Errorf("writer %d before the kill: %v", w, err)
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Errorf("writer %d op %d: status %d", w, i, resp.StatusCode)
					return
				}
				o.seq = resp.Header.Get(store.HeaderAuditSeq)
				acked[w] = append(acked[w], o)
				mu.Lock()
				acks++
				if acks == killAfter {
					// Kill while the other writers have requests in flight.
					close(killed)
					if err := cmd.Process.Signal(os.Kill); err != nil {
						t.Errorf("kill: %v", err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	err = cmd.Wait()
	waited = true
	if t.Failed() {
		t.Fatalf("helper stderr:\n%s", stderr.String())
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ProcessState.String() != "signal: killed" {
		t.Fatalf("helper ended with %v, want killed; stderr:\n%s", err, stderr.String())
	}

	s, err := store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	audit, err := s.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[string]store.AuditRecord{}
	perObject := map[string][]uint64{}
	for _, r := range audit {
		bySeq[tok(r.Seq)] = r
		perObject[r.Object] = append(perObject[r.Object], r.Token)
	}

	total := 0
	for w := range writers {
		name, scope := fmt.Sprintf("obj-%d", w), fmt.Sprintf("scope-%d", w)
		ops := acked[w]
		total += len(ops)
		if len(ops) == 0 {
			continue
		}
		lastAcked := ops[len(ops)-1]

		// Every acknowledged write is in the audit as acknowledged.
		for _, o := range ops {
			r, ok := bySeq[o.seq]
			wantOp := store.OpPut
			if o.del {
				wantOp = store.OpDelete
			}
			if !ok || r.Object != name || r.Scope != scope || r.Token != o.token || r.Op != wantOp || r.ValueLength != int64(len(o.value)) {
				t.Errorf("writer %d: acknowledged %+v, audit has %+v (found %v)", w, o, r, ok)
			}
		}

		// The audit holds tokens 1..k in order, possibly followed by the one
		// write whose answer the kill cut off.
		tokens := perObject[name]
		allowed := len(ops)
		if inFlight[w] != nil {
			allowed++
		}
		if len(tokens) < len(ops) || len(tokens) > allowed {
			t.Errorf("writer %d: audit tokens %v, acknowledged %d, in flight %v", w, tokens, len(ops), inFlight[w] != nil)
		}
		for i, tk := range tokens {
			if tk != uint64(i+1) {
				t.Errorf("writer %d: audit tokens %v are not 1, 2, 3, ...", w, tokens)
				break
			}
		}

		// The object is in the state of the last applied write.
		final := lastAcked
		if len(tokens) > len(ops) {
			final = *inFlight[w]
		}
		obj, err := s.Get(context.Background(), name)
		present, value := final.state()
		switch {
		case !present && !errors.Is(err, store.ErrNotFound):
			t.Errorf("writer %d: %s = %+v, %v; want deleted by token %d", w, name, obj, err, final.token)
		case present && (err != nil || string(obj.Value) != value || obj.Token != final.token):
			t.Errorf("writer %d: %s = %q token %d, %v; want %q token %d", w, name, obj.Value, obj.Token, err, value, final.token)
		}

		// The highest token survived, and still fences.
		h, err := s.Highest(context.Background(), scope)
		if err != nil || h != final.token {
			t.Errorf("writer %d: Highest = %d, %v; want %d", w, h, err, final.token)
		}
		if h > 1 {
			if _, err := s.Put(context.Background(), scope, h-1, name, []byte("stale")); !errors.Is(err, fence.ErrStaleToken) {
				t.Errorf("writer %d: stale Put after reopen = %v", w, err)
			}
		}
	}
	if total < killAfter {
		t.Errorf("only %d acknowledged writes", total)
	}
	cut := 0
	for _, o := range inFlight {
		if o != nil {
			cut++
		}
	}
	t.Logf("%d writes acknowledged before the kill, %d cut off by it, %d audited after reopen", total, cut, len(audit))
}
