//go:build race

package noreplay_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/noreplay"
)

// TestNoRaceAfterGoAway drives the standard library's race (see the package
// doc) for a few seconds: requests with bodies over h2c while the server
// shuts down gracefully (GOAWAY) and the callers' contexts end. Through a
// bare http.Transport the race detector reports it within a second or two
// on a 2-core machine; through Transport it must stay silent. Only a race
// build compiles this test: the race detector is its assertion.
func TestNoRaceAfterGoAway(t *testing.T) {
	end := time.Now().Add(4 * time.Second)
	rounds := 0
	for ; time.Now().Before(end); rounds++ {
		goAwayRound(t)
	}
	t.Logf("%d rounds", rounds)
}

func goAwayRound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: h2c, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})}
	go srv.Serve(ln)
	tr := &http.Transport{Protocols: h2c}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: noreplay.Transport{Next: tr}}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				body := bytes.Repeat([]byte("x"), 100+rand.IntN(40_000))
				req, err := http.NewRequestWithContext(ctx, "POST", "http://"+ln.Addr().String()+"/", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	time.Sleep(time.Duration(2+rand.IntN(5)) * time.Millisecond) // let requests start
	go func() {
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		cancel()
	}()
	shutdown, stop := context.WithTimeout(context.Background(), time.Duration(rand.IntN(2000))*time.Microsecond)
	srv.Shutdown(shutdown)
	stop()
	srv.Close()
	cancel()
	wg.Wait()
}
