package fencebolt_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencebolt"
)

var nop = func(context.Context) error { return nil }

func TestBoltReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	g, err := fencebolt.Open(path, fencebolt.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "a", 41, nop); err != nil {
		t.Fatal(err)
	}
	if err := g.DoTx(ctx, "b", 7, func(*bbolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "a", 50, nop); !errors.Is(err, berrors.ErrDatabaseNotOpen) {
		t.Errorf("Do after Close = %v, want ErrDatabaseNotOpen", err)
	}

	g = openBolt(t, path, fencebolt.Config{})
	for scope, want := range map[string]uint64{"a": 41, "b": 7} {
		if h, err := g.Highest(ctx, scope); err != nil || h != want {
			t.Errorf("Highest(%q) after reopen = %d, %v; want %d", scope, h, err, want)
		}
	}
	var stale *fence.StaleTokenError
	if err := g.Do(ctx, "a", 40, nop); !errors.As(err, &stale) || stale.Highest != 41 {
		t.Errorf("Do(40) after reopen = %v, want stale with highest 41", err)
	}
}

func TestBoltDoTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	const scope = "objects/x"
	put := func(value string, err error) func(tx *bbolt.Tx) error {
		return func(tx *bbolt.Tx) error {
			bk, e := tx.CreateBucketIfNotExists([]byte("data"))
			if e != nil {
				return e
			}
			if e := bk.Put([]byte(scope), []byte(value)); e != nil {
				return e
			}
			return err
		}
	}
	read := func() string {
		var v string
		if err := g.DB().View(func(tx *bbolt.Tx) error {
			if bk := tx.Bucket([]byte("data")); bk != nil {
				v = string(bk.Get([]byte(scope)))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	boom := errors.New("boom")
	steps := []struct {
		name      string
		token     uint64
		value     string
		applyErr  error
		wantErr   error
		wantValue string
		wantHigh  uint64
	}{
		{"first write", 10, "v10", nil, nil, "v10", 10},
		{"apply error rolls back data and token", 20, "v20", boom, boom, "v10", 10},
		{"stale", 9, "v9", nil, fence.ErrStaleToken, "v10", 10},
		{"same token", 10, "v10b", nil, nil, "v10b", 10},
		{"higher", 11, "v11", nil, nil, "v11", 11},
	}
	for _, s := range steps {
		called := false
		apply := put(s.value, s.applyErr)
		err := g.DoTx(ctx, scope, s.token, func(tx *bbolt.Tx) error { called = true; return apply(tx) })
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: DoTx = %v, want %v", s.name, err, s.wantErr)
		}
		if called == errors.Is(s.wantErr, fence.ErrStaleToken) {
			t.Errorf("%s: apply called = %v", s.name, called)
		}
		if v := read(); v != s.wantValue {
			t.Errorf("%s: data = %q, want %q", s.name, v, s.wantValue)
		}
		if h, _ := g.Highest(ctx, scope); h != s.wantHigh {
			t.Errorf("%s: Highest = %d, want %d", s.name, h, s.wantHigh)
		}
	}
}

func TestBoltOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, o := range []*bbolt.Options{{NoSync: true}, {ReadOnly: true}} {
		if g, err := fencebolt.Open(filepath.Join(dir, "x.db"), fencebolt.Config{Bolt: o}); err == nil {
			g.Close()
			t.Errorf("OpenBolt with %+v succeeded", *o)
		}
	}
	// The file is locked while open; a second open times out.
	path := filepath.Join(dir, "locked.db")
	openBolt(t, path, fencebolt.Config{})
	_, err := fencebolt.Open(path, fencebolt.Config{Bolt: &bbolt.Options{Timeout: 50 * time.Millisecond}})
	if !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("second OpenBolt = %v, want ErrTimeout", err)
	}
}

func TestBoltScopeTooLong(t *testing.T) {
	t.Parallel()
	g := openBolt(t, filepath.Join(t.TempDir(), "fence.db"), fencebolt.Config{})
	scope := strings.Repeat("k", bbolt.MaxKeySize+1)
	called := false
	err := g.Do(context.Background(), scope, 1, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, fence.ErrInvalidScope) || called {
		t.Errorf("Do with a %d-byte scope = %v, called %v", len(scope), err, called)
	}
	if _, err := g.Highest(context.Background(), scope); !errors.Is(err, fence.ErrInvalidScope) {
		t.Errorf("Highest with a %d-byte scope = %v", len(scope), err)
	}
}

// TestBoltCloseWaits checks that Close lets a Do whose apply has already
// run record its token, instead of closing the file under it.
func TestBoltCloseWaits(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fence.db")
	synctest.Test(t, func(t *testing.T) {
		g, err := fencebolt.Open(path, fencebolt.Config{})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		doErr := make(chan error, 1)
		go func() {
			doErr <- g.Do(context.Background(), "a", 3, func(context.Context) error {
				<-release
				return nil
			})
		}()
		synctest.Wait() // Do is inside apply
		closeErr := make(chan error, 1)
		go func() { closeErr <- g.Close() }()
		synctest.Wait() // Close is waiting for Do
		select {
		case err := <-closeErr:
			t.Fatalf("Close returned (%v) while a mutation was in progress", err)
		default:
		}
		close(release)
		if err := <-doErr; err != nil {
			t.Errorf("Do racing with Close: %v", err)
		}
		if err := <-closeErr; err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	g := openBolt(t, path, fencebolt.Config{})
	if h, err := g.Highest(context.Background(), "a"); err != nil || h != 3 {
		t.Errorf("Highest after Close = %d, %v; want 3", h, err)
	}
}

const helperEnv = "FENCE_BOLT_HELPER_PATH"

// TestBoltHelperProcess is not a test: TestBoltKill runs the test binary
// again with helperEnv set, and this function then writes tokens until it is
// killed, printing each one that Do acknowledged.
func TestBoltHelperProcess(t *testing.T) {
	t.Parallel()
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process for TestBoltKill")
	}
	g, err := fencebolt.Open(path, fencebolt.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	// Bounded, in case the parent dies without killing us.
	for token := uint64(1); token < 1e6; token++ {
		scope := fmt.Sprintf("s%d", token%3)
		var err error
		if token%2 == 0 {
			err = g.Do(ctx, scope, token, nop)
		} else {
			err = g.DoTx(ctx, scope, token, func(tx *bbolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("data"))
				if err != nil {
					return err
				}
				return bk.Put([]byte(scope), []byte(strconv.FormatUint(token, 10)))
			})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		// Unbuffered: once this write returns, the parent may count on it.
		fmt.Fprintf(os.Stdout, "%s %d\n", scope, token)
	}
	os.Exit(0)
}

// TestBoltKill kills a writer with SIGKILL while it is writing tokens and
// checks that every token it acknowledged is still the floor afterwards.
func TestBoltKill(t *testing.T) {
	t.Parallel()
	if os.Getenv(helperEnv) != "" {
		t.Skip("in helper process")
	}
	path := filepath.Join(t.TempDir(), "fence.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoltHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := make(map[string]uint64) // highest acknowledged per scope
	odd := make(map[string]uint64)   // highest acknowledged DoTx per scope
	n := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var scope string
		var token uint64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d", &scope, &token); err != nil {
			t.Fatalf("helper printed %q", sc.Text())
		}
		acked[scope] = max(acked[scope], token)
		if token%2 == 1 {
			odd[scope] = max(odd[scope], token)
		}
		// Kill mid-run; lines the helper writes meanwhile are still read
		// (and count as acknowledged) until the pipe closes.
		if n++; n == 150 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want killed; stderr:\n%s", err, stderr.String())
	}
	if n < 150 {
		t.Fatalf("helper acknowledged only %d tokens", n)
	}
	t.Logf("helper acknowledged %d tokens before SIGKILL", n)

	g := openBolt(t, path, fencebolt.Config{})
	ctx := context.Background()
	for scope, token := range acked {
		h, err := g.Highest(ctx, scope)
		if err != nil || h < token {
			t.Errorf("%s: Highest after kill = %d, %v; acknowledged %d", scope, h, err, token)
		}
		var stale *fence.StaleTokenError
		if err := g.Do(ctx, scope, token-1, nop); !errors.As(err, &stale) {
			t.Errorf("%s: Do(%d) after kill = %v, want stale", scope, token-1, err)
		}
	}
	// DoTx data commits with its token: the stored value is at least the
	// last acknowledged DoTx token, and never above the recorded highest.
	data := make(map[string]string)
	err = g.DB().View(func(tx *bbolt.Tx) error {
		bk := tx.Bucket([]byte("data"))
		if bk == nil {
			return errors.New("no data bucket")
		}
		return bk.ForEach(func(k, v []byte) error {
			data[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for scope, token := range odd {
		v, err := strconv.ParseUint(data[scope], 10, 64)
		if err != nil || v < token {
			t.Errorf("%s: data %q after kill, acknowledged DoTx %d", scope, data[scope], token)
		}
		if h, _ := g.Highest(ctx, scope); v > h {
			t.Errorf("%s: data written with %d, but Highest is %d", scope, v, h)
		}
	}
}

func openBolt(t testing.TB, path string, cfg fencebolt.Config) *fencebolt.Guard {
	t.Helper()
	g, err := fencebolt.Open(path, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}
