package fences3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fences3"
	"github.com/fencedio/fenced/internal/testenv"
)

const (
	accessKey = "fenced-test"
	secretKey = "fenced-test-secret"
)

// One versitygw serves the package's tests; each test makes buckets of its
// own.
var (
	gwMu sync.Mutex
	gw   *gateway
)

func TestMain(m *testing.M) {
	code := m.Run()
	gwMu.Lock()
	if gw != nil {
		gw.stop()
	}
	gwMu.Unlock()
	os.Exit(code)
}

type gateway struct {
	url    string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	out    bytes.Buffer // read only after exited is closed
}

// endpoint returns the URL of the test S3 server, started on first use.
func endpoint(t *testing.T) string {
	t.Helper()
	bin := testenv.VersityGW(t)
	gwMu.Lock()
	defer gwMu.Unlock()
	if gw == nil {
		g, err := startGateway(bin)
		if err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		gw = g
	}
	return gw.url
}

// startGateway runs versitygw on a loopback port with a POSIX backend in
// a new directory. A port taken between choosing it and versitygw binding
// it makes versitygw exit: another port is tried, three in all.
func startGateway(bin string) (*gateway, error) {
	dir, err := os.MkdirTemp("", "fences3-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		g := &gateway{url: "http://" + addr, dir: dir, exited: make(chan struct{})}
		g.cmd = exec.Command(bin, "--port", addr, "--access", accessKey, "--secret", secretKey, "--quiet", "posix", dir)
		g.cmd.Stdout, g.cmd.Stderr = &g.out, &g.out
		if err := g.cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		go func() { g.cmd.Wait(); close(g.exited) }()
		if last = g.waitListening(addr, 30*time.Second); last == nil {
			return g, nil
		}
		g.kill()
	}
	os.RemoveAll(dir)
	return nil, last
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until addr accepts connections. versitygw cannot
// listen on port 0 nor say when it is ready, so this polls, bounded by
// timeout and by the process exiting.
func (g *gateway) waitListening(addr string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-g.exited:
			return fmt.Errorf("versitygw exited: %s", strings.TrimSpace(g.out.String()))
		case <-deadline.C:
			return fmt.Errorf("versitygw not listening on %s after %v", addr, timeout)
		case <-tick.C:
		}
	}
}

func (g *gateway) kill() {
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.exited
	}
}

func (g *gateway) stop() {
	g.kill()
	os.RemoveAll(g.dir)
}

// newClient returns an S3 client of the test server through rt (nil: the
// default transport).
func newClient(t *testing.T, rt http.RoundTripper) *s3.Client {
	t.Helper()
	if rt == nil {
		rt = http.DefaultTransport
	}
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint(t)),
		UsePathStyle: true,
		Region:       "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secretKey}, nil
		}),
		HTTPClient: &http.Client{Transport: rt},
	})
}

// newBucketName creates an empty bucket.
func newBucketName(t *testing.T) string {
	t.Helper()
	name := "fences3-" + strings.ToLower(rand.Text())
	if _, err := newClient(t, nil).CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return name
}

// rawGet reads an object's body with a plain GET.
func rawGet(t *testing.T, bucket, key string) []byte {
	t.Helper()
	out, err := newClient(t, nil).GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return b
}

// newBucket returns a guard over a new bucket, and the bucket's name.
func newBucket(t *testing.T, cfg fences3.Config) (*fences3.Bucket, string) {
	t.Helper()
	name := newBucketName(t)
	return guardOver(t, newClient(t, nil), name, cfg), name
}

func guardOver(t *testing.T, c *s3.Client, bucket string, cfg fences3.Config) *fences3.Bucket {
	t.Helper()
	g, err := fences3.New(c, bucket, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// transport counts the answers to object PUTs by status, can run a hook
// before the next object PUT is sent (another writer changing the object
// in between the guard's read and its write), and can drop the answers of
// object PUTs after the server gave them (a reply lost with its
// connection).
type transport struct {
	mu       sync.Mutex
	statuses map[int]int
	before   func()
	drop     int
}

func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	objectPut := r.Method == http.MethodPut && strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
	if !objectPut {
		return http.DefaultTransport.RoundTrip(r)
	}
	tr.mu.Lock()
	before := tr.before
	tr.before = nil
	tr.mu.Unlock()
	if before != nil {
		before()
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.statuses == nil {
		tr.statuses = map[int]int{}
	}
	tr.statuses[resp.StatusCode]++
	if tr.drop > 0 {
		tr.drop--
		resp.Body.Close()
		return nil, errors.New("test: reply lost")
	}
	return resp, nil
}

func (tr *transport) beforeNextPut(f func()) {
	tr.mu.Lock()
	tr.before = f
	tr.mu.Unlock()
}

func (tr *transport) dropNextReply() {
	tr.mu.Lock()
	tr.drop++
	tr.mu.Unlock()
}

func (tr *transport) count(status int) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.statuses[status]
}

// decisions records what a guard tells its observer.
type decisions struct {
	mu sync.Mutex
	ds []decision
}

type decision struct {
	Presented, Highest, Sequence uint64
	Accepted, Duplicate          bool
	Owner                        string
}

func (d *decisions) Observe(_ context.Context, x fence.Decision) {
	d.mu.Lock()
	d.ds = append(d.ds, decision{x.Presented, x.Highest, x.Sequence, x.Accepted, x.Duplicate, x.Owner})
	d.mu.Unlock()
}

func (d *decisions) all() []decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]decision(nil), d.ds...)
}
