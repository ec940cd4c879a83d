package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/fencedio/fenced/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// leaseTTL is the TTL of the leases (fenced) and sessions or leases (etcd)
// of the throughput workloads: long enough that background renewal is
// rare, the same for both.
const leaseTTL = 10 * time.Second

// system is a lease service under test.
type system interface {
	name() string
	// dial returns a new benchmark client with its own client object and
	// connection, already connected.
	dial(ctx context.Context) (conn, error)
}

// conn is one benchmark client. It is used by one goroutine at a time.
type conn interface {
	// lock acquires key. With wait it waits in line while the key is held;
	// without, a held key is an error.
	lock(ctx context.Context, key string, wait bool) (held, error)
	// hold acquires key and returns a handle whose renew renews it once.
	hold(ctx context.Context, key string) (renewable, error)
	// holdStream is hold with renewals over one long-lived stream.
	holdStream(ctx context.Context, key string) (renewable, error)
	close()
}

type held interface {
	release(ctx context.Context) error
}

type renewable interface {
	held
	renew(ctx context.Context) error
}

// fenced, through its Go client.

// fencedSystem is fenced, one node or a cluster.
type fencedSystem struct {
	label       string
	endpoints   []string
	leaderFirst bool // see sysSpec
	dials       atomic.Int64
}

func (s *fencedSystem) name() string { return s.label }

func (s *fencedSystem) dial(ctx context.Context) (conn, error) {
	// Every client gets every node, as users configure a cluster; each
	// starts at the next node in turn, so that the clients are spread
	// over the nodes as etcd's client balances its calls over them.
	first := int(s.dials.Add(1)-1) % len(s.endpoints)
	if s.leaderFirst {
		var err error
		if first, err = leaderIndex(ctx, s.endpoints); err != nil {
			return nil, err
		}
	}
	endpoints := append(append([]string(nil), s.endpoints[first:]...), s.endpoints[:first]...)
	// The client's default transports, as users get them.
	c, err := client.New(client.Config{
		Endpoints: endpoints,
		Owner:     "fencedbench",
		TTL:       leaseTTL,
	})
	if err != nil {
		return nil, err
	}
	// Open the connection now, so that no run times a dial.
	if _, err := c.Get(ctx, "fencedbench/warmup"); err != nil {
		c.CloseIdleConnections()
		return nil, fmt.Errorf("fenced warm-up: %w", err)
	}
	return &fencedConn{c: c}, nil
}

type fencedConn struct{ c *client.Client }

func (f *fencedConn) lock(ctx context.Context, key string, wait bool) (held, error) {
	var opts []client.AcquireOption
	if wait {
		opts = append(opts, client.WithWait(time.Minute))
	}
	l, err := f.c.Acquire(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return fencedHeld{l}, nil
}

func (f *fencedConn) hold(ctx context.Context, key string) (renewable, error) {
	l, err := f.c.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return fencedRenewable{fencedHeld{l}, f.c}, nil
}

// holdStream renews over the KeepAlive stream.
func (f *fencedConn) holdStream(ctx context.Context, key string) (renewable, error) {
	l, err := f.c.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return fencedStreamRenewable{fencedHeld{l}, f.c.KeepAlive(ctx)}, nil
}

type fencedStreamRenewable struct {
	fencedHeld
	ka *client.KeepAliveStream
}

func (r fencedStreamRenewable) renew(context.Context) error {
	_, err := r.ka.Renew(r.l.Key(), r.l.ID())
	return err
}

func (r fencedStreamRenewable) release(ctx context.Context) error {
	r.ka.Close()
	return r.fencedHeld.release(ctx)
}

func (f *fencedConn) close() { f.c.CloseIdleConnections() }

type fencedHeld struct{ l *client.Lease }

func (h fencedHeld) release(ctx context.Context) error { return h.l.Release(ctx) }

type fencedRenewable struct {
	fencedHeld
	c *client.Client
}

// renew is the unary Renew RPC. The lease also renews itself every TTL/3
// in the background, which adds one request per client every few seconds.
func (r fencedRenewable) renew(ctx context.Context) error {
	_, err := r.c.Renew(ctx, r.l.Key(), r.l.ID())
	return err
}

// etcd, through clientv3 and its concurrency package.

// etcdSystem is etcd, one member or a cluster.
type etcdSystem struct {
	label     string
	endpoints []string
}

func (s etcdSystem) name() string { return s.label }

func (s etcdSystem) dial(ctx context.Context) (conn, error) {
	cli, err := newEtcdClient(s.endpoints)
	if err != nil {
		return nil, err
	}
	// A session is a lease kept alive by a background stream, as an etcd
	// lock user would hold one; creating it also opens the connection.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(leaseTTL/time.Second)), concurrency.WithContext(context.Background()))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdConn{cli: cli, sess: sess}, nil
}

type etcdConn struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func (e *etcdConn) lock(ctx context.Context, key string, wait bool) (held, error) {
	// Lock whether or not wait is set: on a free key it costs what TryLock
	// does (one transaction), and it is what etcd lock users call.
	m := concurrency.NewMutex(e.sess, key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdHeld{m}, nil
}

// hold grants a lease and attaches key to it, as a holder of a named lease
// would; renew is one KeepAliveOnce.
func (e *etcdConn) hold(ctx context.Context, key string) (renewable, error) {
	g, err := e.cli.Grant(ctx, int64(leaseTTL/time.Second))
	if err != nil {
		return nil, err
	}
	if _, err := e.cli.Put(ctx, key, "", clientv3.WithLease(g.ID)); err != nil {
		return nil, err
	}
	return etcdRenewable{cli: e.cli, id: g.ID}, nil
}

// holdStream renews over etcd's LeaseKeepAlive stream, one request and
// its answer at a time, as KeepAliveOnce does but without opening a stream
// per renewal.
func (e *etcdConn) holdStream(ctx context.Context, key string) (renewable, error) {
	h, err := e.hold(ctx, key)
	if err != nil {
		return nil, err
	}
	stream, err := pb.NewLeaseClient(e.cli.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	return etcdStreamRenewable{h.(etcdRenewable), stream}, nil
}

type etcdStreamRenewable struct {
	etcdRenewable
	stream pb.Lease_LeaseKeepAliveClient
}

func (r etcdStreamRenewable) renew(context.Context) error {
	if err := r.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(r.id)}); err != nil {
		return err
	}
	resp, err := r.stream.Recv()
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		return fmt.Errorf("etcd lease %x not found", r.id)
	}
	return nil
}

func (r etcdStreamRenewable) release(ctx context.Context) error {
	r.stream.CloseSend()
	return r.etcdRenewable.release(ctx)
}

func (e *etcdConn) close() {
	e.sess.Close()
	e.cli.Close()
}

type etcdHeld struct{ m *concurrency.Mutex }

func (h etcdHeld) release(ctx context.Context) error { return h.m.Unlock(ctx) }

type etcdRenewable struct {
	cli *clientv3.Client
	id  clientv3.LeaseID
}

func (r etcdRenewable) renew(ctx context.Context) error {
	_, err := r.cli.KeepAliveOnce(ctx, r.id)
	return err
}

func (r etcdRenewable) release(ctx context.Context) error {
	_, err := r.cli.Revoke(ctx, r.id)
	return err
}

// leaderIndex returns the index of the endpoint whose node leads and
// serves acquisitions (GET /v1/role).
func leaderIndex(ctx context.Context, endpoints []string) (int, error) {
	for i, e := range endpoints {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e+"/v1/role", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		var role struct {
			Role  string `json:"role"`
			Ready bool   `json:"ready"`
		}
		err = json.NewDecoder(resp.Body).Decode(&role)
		resp.Body.Close()
		if err == nil && role.Role == "leader" && role.Ready {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no leader among %v", endpoints)
}
