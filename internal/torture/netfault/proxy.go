package netfault

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/torture/history"
)

// DelayProxy holds every request for a random time longer than the lease
// TTL, then delivers it to the store, whether or not the client is still
// waiting: a packet stuck in the network that arrives after the lease it
// was sent under has expired.
type DelayProxy struct {
	target   *url.URL
	min, max time.Duration
	client   *http.Client

	mu      sync.Mutex
	rng     *rand.Rand
	records []history.DelayedWrite
	drained bool
	wg      sync.WaitGroup
	closing chan struct{}
	Close   sync.Once
	srv     *http.Server
	ln      net.Listener
}

// NewDelayProxy starts a proxy on a loopback port that holds each request
// for min to max before it delivers it to target.
func NewDelayProxy(target string, min, max time.Duration, seed uint64) (*DelayProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{
		target: u, min: min, max: max,
		client:  &http.Client{Timeout: 10 * time.Second},
		rng:     rand.New(rand.NewPCG(seed, 0x70)),
		closing: make(chan struct{}),
		ln:      ln,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// URL is the base URL the workers send delayed writes to.
func (p *DelayProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *DelayProxy) hold() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.min + time.Duration(p.rng.Int64N(int64(p.max-p.min)+1))
}

func (p *DelayProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec := history.DelayedWrite{Received: time.Now().UnixNano(), Hold: p.hold()}
	rec.Scope, rec.Token, _ = fencehttp.FromHeader(r.Header)
	if name, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/objects/"); ok {
		rec.Object, _ = url.PathUnescape(name)
	}
	out, err := http.NewRequestWithContext(context.Background(), r.Method,
		p.target.Scheme+"://"+p.target.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.Header = r.Header.Clone()
	type answer struct {
		status int
		header http.Header
		body   []byte
	}
	answered := make(chan answer, 1)
	p.mu.Lock()
	if p.drained {
		p.mu.Unlock()
		http.Error(w, "proxy closed", http.StatusServiceUnavailable)
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	// Delivery does not depend on the client: it has usually given up.
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(rec.Hold)
		select {
		case <-t.C:
		case <-p.closing:
			t.Stop()
		}
		rec.Delivered = time.Now().UnixNano()
		var a answer
		resp, err := p.client.Do(out)
		if err != nil {
			rec.Err = err.Error()
		} else {
			a.body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			rec.Status, a.status, a.header = resp.StatusCode, resp.StatusCode, resp.Header
		}
		p.mu.Lock()
		p.records = append(p.records, rec)
		p.mu.Unlock()
		answered <- a
	}()
	select {
	case a := <-answered:
		if a.status == 0 {
			http.Error(w, "delivery failed: "+rec.Err, http.StatusBadGateway)
			return
		}
		for k, v := range a.header {
			w.Header()[k] = v
		}
		w.WriteHeader(a.status)
		w.Write(a.body)
	case <-r.Context().Done():
	}
}

// Drain delivers every held request (at once if ctx ends first), stops the
// proxy and returns what was delivered.
func (p *DelayProxy) Drain(ctx context.Context) []history.DelayedWrite {
	p.mu.Lock()
	p.drained = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.Close.Do(func() { close(p.closing) })
		<-done
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.srv.Shutdown(sctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]history.DelayedWrite(nil), p.records...)
}
