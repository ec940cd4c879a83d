package fencenats_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/fence/fencenats"
)

func TestStreamDecisions(t *testing.T) {
	js := jetStream(t)
	s, name := stream(t, js)
	g, err := fencenats.NewStream(js, s, fencenats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	subject := name + ".orders.7"
	seq := func(q uint64) context.Context { return fence.WithSequence(ctx, q) }
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		scope string
		token uint64
		err   error
	}{
		{"first", ctx, "orders/7", 5, nil},
		{"equal", ctx, "orders/7", 5, nil},
		{"higher", seq(1), "orders/7", 6, nil},
		{"duplicate", seq(1), "orders/7", 6, fence.ErrDuplicate},
		{"stale", ctx, "orders/7", 5, fence.ErrStaleToken},
		{"next", seq(2), "orders/7", 6, nil},
		{"another scope", ctx, "orders/8", 100, fencenats.ErrScopeMismatch},
	} {
		_, err := g.Publish(tc.ctx, tc.scope, tc.token, &nats.Msg{Subject: subject, Data: []byte(tc.name)})
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Fatalf("%s: Publish = %v, want %v", tc.name, err, tc.err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 4 {
		t.Fatalf("stream holds %d messages, %v; want 4", info.State.Msgs, err)
	}
	last, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	st, err := fencemsg.ReadStamp(last.Header)
	if err != nil || st.Token != 6 || st.Sequence != 2 || st.Scope != "orders/7" || string(last.Data) != "next" {
		t.Fatalf("last message %q stamp %+v, %v", last.Data, st, err)
	}
	// The server honours an expected last subject sequence of 0 (no
	// message yet), which the first publish on a subject relies on.
	zero := &nats.Msg{Subject: subject, Header: nats.Header{fencenats.ExpectedLastSubjectSequence: []string{"0"}}}
	if _, err := js.PublishMsg(ctx, zero); err == nil {
		t.Fatal("a publish expecting an empty subject was stored on a subject with messages")
	}
	if h, err := g.Highest(ctx, subject); err != nil || h != 6 {
		t.Fatalf("Highest = %d, %v", h, err)
	}
	// A message that bypassed the guard is not overwritten by a guess.
	if _, err := js.Publish(ctx, name+".raw", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Publish(ctx, "raw", 1, &nats.Msg{Subject: name + ".raw"}); !errors.Is(err, fencenats.ErrCorruptEntry) {
		t.Fatalf("Publish after an unfenced message = %v", err)
	}
}

// Publishers with rising tokens race on one subject: the stream's log of
// the subject never goes back to a lower token.
func TestStreamConcurrent(t *testing.T) {
	js := jetStream(t)
	s, name := stream(t, js)
	g, err := fencenats.NewStream(js, s, fencenats.Config{Attempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	subject := name + ".log"
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				token := uint64(1 + w*3 + i/5) // each writer's tokens rise, and overlap the others'
				_, err := g.Publish(ctx, "log", token, &nats.Msg{Subject: subject, Data: []byte(strconv.FormatUint(token, 10))})
				if err != nil && !errors.Is(err, fence.ErrStaleToken) {
					t.Errorf("publish token %d: %v", token, err)
				}
			}
		}()
	}
	wg.Wait()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prev uint64
	for q := info.State.FirstSeq; q <= info.State.LastSeq; q++ {
		m, err := s.GetMsg(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		st, err := fencemsg.ReadStamp(m.Header)
		if err != nil {
			t.Fatal(err)
		}
		if st.Token < prev {
			t.Fatalf("message %d has token %d after %d", q, st.Token, prev)
		}
		prev = st.Token
	}
	if prev != 12 {
		t.Fatalf("last token %d, want 12 (the highest published)", prev)
	}
}
