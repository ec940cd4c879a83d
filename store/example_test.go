package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/store"
)

// B holds the lease with token 42 and writes; A, paused while its lease
// with token 41 expired, wakes up and writes too. The store keeps B's write.
func ExampleStore_Handler() {
	dir, err := os.MkdirTemp("", "fenced-store-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	put := func(token, value string) *http.Response {
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1/objects/orders/7/state", strings.NewReader(value))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Fencing-Scope", "orders/7")
		req.Header.Set("Fencing-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		return resp
	}

	resp := put("42", "shipped by B")
	resp.Body.Close()
	fmt.Println("token 42:", resp.Status)

	resp = put("41", "cancelled by A")
	var problem struct {
		Title          string `json:"title"`
		Scope          string `json:"scope"`
		PresentedToken uint64 `json:"presentedToken"`
		HighestToken   uint64 `json:"highestToken"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&problem); err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("token 41:", resp.Status, resp.Header.Get("Content-Type"))
	fmt.Printf("%s: scope %s, presented %d, highest %d\n",
		problem.Title, problem.Scope, problem.PresentedToken, problem.HighestToken)

	resp, err = http.Get(srv.URL + "/v1/objects/orders/7/state")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("stored: %q (Fencing-Token %s)\n", body, resp.Header.Get("Fencing-Token"))

	// Output:
	// token 42: 204 No Content
	// token 41: 409 Conflict application/problem+json
	// Stale fencing token: scope orders/7, presented 41, highest 42
	// stored: "shipped by B" (Fencing-Token 42)
}

// The same store used in process, without HTTP.
func ExampleStore_Put() {
	dir, err := os.MkdirTemp("", "fenced-store-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	rec, err := s.Put(ctx, "orders/7", 42, "orders/7/state", []byte("shipped by B"))
	fmt.Println("token 42: seq", rec.Seq, err)

	_, err = s.Put(ctx, "orders/7", 41, "orders/7/state", []byte("cancelled by A"))
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("token 41: rejected, highest is %d\n", stale.Highest)
	}

	obj, _ := s.Get(ctx, "orders/7/state")
	fmt.Printf("stored: %q (token %d)\n", obj.Value, obj.Token)

	// Output:
	// token 42: seq 1 <nil>
	// token 41: rejected, highest is 42
	// stored: "shipped by B" (token 42)
}

// The tokens come from real leases: A's lease expires on the server while A
// is paused, B acquires the key, and A's write after the pause is rejected.
func ExampleStore_Put_lease() {
	// An in-process fenced node; in production, Endpoint names yours.
	t := &fencedtest.ExampleTB{}
	defer t.Close()
	srv := fencedtest.Start(t)

	ctx := context.Background()
	a, err := client.New(client.Config{Endpoint: srv.URL, Owner: "A", TTL: 300 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	b, err := client.New(client.Config{Endpoint: srv.URL, Owner: "B"})
	if err != nil {
		log.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "fenced-store-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// The lease key is the fencing scope of the object's writes.
	put := func(l *client.Lease, value string) string {
		_, err := s.Put(ctx, l.Key(), l.Token(), "orders/7/state", []byte(value))
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			return "rejected (stale)"
		case err != nil:
			return err.Error()
		}
		return "accepted"
	}

	leaseA, err := a.Acquire(ctx, "orders/7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A writes with its token:", put(leaseA, "paid by A"))

	// A pauses (GC, VM freeze) and sends no renewals. Orphan stands in for
	// the pause: it stops the renewals without releasing, so the server
	// expires the lease after its TTL, and B, waiting, gets the key.
	leaseA.Orphan()
	leaseB, err := b.Acquire(ctx, "orders/7", client.WithWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer leaseB.Release(ctx)
	fmt.Println("B's token is higher:", leaseB.Token() > leaseA.Token())
	fmt.Println("B writes with its token:", put(leaseB, "shipped by B"))

	// A resumes and writes with the token it acquired.
	fmt.Println("A's late write:", put(leaseA, "cancelled by A"))

	obj, err := s.Get(ctx, "orders/7/state")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored: %q, with B's token: %v\n", obj.Value, obj.Token == leaseB.Token())
	// Output:
	// A writes with its token: accepted
	// B's token is higher: true
	// B writes with its token: accepted
	// A's late write: rejected (stale)
	// stored: "shipped by B", with B's token: true
}
