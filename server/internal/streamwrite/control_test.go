package streamwrite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a ResponseWriter that records its flushes and deadlines.
type recorder struct {
	*httptest.ResponseRecorder
	flushes        int
	writeDeadlines []time.Time
	readDeadline   time.Time
}

func (r *recorder) Flush() { r.flushes++ }

func (r *recorder) SetWriteDeadline(t time.Time) error {
	r.writeDeadlines = append(r.writeDeadlines, t)
	return nil
}

func (r *recorder) SetReadDeadline(t time.Time) error {
	r.readDeadline = t
	return nil
}

// serve runs handle under Wrap for a request that is a stream when
// stream is true, and returns what reached the writer.
func serve(stream bool, handle func(http.ResponseWriter, *Control)) *recorder {
	rec := &recorder{ResponseRecorder: httptest.NewRecorder()}
	h := Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(w, From(r.Context())) }),
		func(*http.Request) bool { return stream }, 0, nil)
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/", nil))
	return rec
}

// Only streams get a Control; for them, flushes after a send with more to
// follow are skipped, and the next one carries all.
func TestFlushesHeldWhileMoreFollows(t *testing.T) {
	unary := serve(false, func(w http.ResponseWriter, ctl *Control) {
		if ctl != nil {
			t.Error("a request that is not a stream got a Control")
		}
		ctl.BeforeSend(time.Second, true) // nil: does nothing
		http.NewResponseController(w).Flush()
	})
	if unary.flushes != 1 {
		t.Errorf("unary request: %d flushes, want 1", unary.flushes)
	}
	rec := serve(true, func(w http.ResponseWriter, ctl *Control) {
		for i := range 3 {
			ctl.BeforeSend(0, i < 2)
			w.Write([]byte{byte('a' + i)})
			http.NewResponseController(w).Flush() // as connect does after every message
		}
	})
	if rec.flushes != 1 || rec.Body.String() != "abc" || len(rec.writeDeadlines) != 0 {
		t.Fatalf("three sends, two with more to follow, no timeout: %d flushes of %q, write deadlines %v; want 1 of \"abc\", none",
			rec.flushes, rec.Body.String(), rec.writeDeadlines)
	}
}

// The write deadline moves only when less than 3/4 of the timeout is
// left, and then to a whole timeout from now.
func TestWriteDeadlineMovesOnlyWhenShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 4 * time.Second
		start := time.Now()
		rec := serve(true, func(w http.ResponseWriter, ctl *Control) {
			ctl.BeforeSend(timeout, false)
			time.Sleep(time.Second) // 3s left: enough
			ctl.BeforeSend(timeout, false)
			time.Sleep(time.Nanosecond) // just under 3s left
			if err := ctl.WriteFlush(timeout, []byte("env")); err != nil {
				t.Error(err)
			}
		})
		want := []time.Time{start.Add(timeout), start.Add(time.Second + time.Nanosecond + timeout)}
		if !slices.Equal(rec.writeDeadlines, want) {
			t.Errorf("write deadlines %v, want %v", rec.writeDeadlines, want)
		}
		if rec.Body.String() != "env" || rec.flushes != 1 {
			t.Errorf("WriteFlush: %q in %d flushes, want \"env\" in 1", rec.Body.String(), rec.flushes)
		}
	})
}

// EndReads sets the read deadline to now; on a nil Control it does
// nothing.
func TestEndReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		rec := serve(true, func(_ http.ResponseWriter, ctl *Control) { ctl.EndReads() })
		if !rec.readDeadline.Equal(now) {
			t.Errorf("read deadline %v, want now (%v)", rec.readDeadline, now)
		}
		From(context.Background()).EndReads()
	})
}
