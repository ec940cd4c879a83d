package netfault

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/torture/history"
)

func TestDelayProxyDeliversAfterTheClientGaveUp(t *testing.T) {
	var (
		mu      sync.Mutex
		arrived []time.Time
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		if r.Header.Get("Fencing-Token") == "3" {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer target.Close()
	const hold = 150 * time.Millisecond
	p, err := NewDelayProxy(target.URL, hold, hold, 1)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for _, tok := range []string{"7", "3"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, p.URL()+"/v1/objects/k%2Fw0%2F"+tok, strings.NewReader("v"))
		req.Header.Set("Fencing-Scope", "k")
		req.Header.Set("Fencing-Token", tok)
		if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("client got %v before the hold ended, want its own timeout", err)
		}
		cancel()
	}
	recs := p.Drain(context.Background())
	if len(recs) != 2 {
		t.Fatalf("proxy delivered %d writes, want 2", len(recs))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, at := range arrived {
		if at.Sub(sent) < hold {
			t.Errorf("a write arrived %v after sending, before the hold of %v", at.Sub(sent), hold)
		}
	}
	byToken := map[uint64]history.DelayedWrite{}
	for _, r := range recs {
		byToken[r.Token] = r
	}
	if r := byToken[7]; r.Status != http.StatusNoContent || r.Object != "k/w0/7" || r.Scope != "k" {
		t.Errorf("token 7: %+v, want 204 for object k/w0/7", r)
	}
	if r := byToken[3]; r.Status != http.StatusConflict {
		t.Errorf("token 3: %+v, want 409", r)
	}
}
