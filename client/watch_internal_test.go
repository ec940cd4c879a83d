package client

import "testing"

// TestResumeCursor: a stream broken between the two events of one
// revision (a release handing the key to a waiter) resumes after the
// revision before and skips the event already delivered, so that fn sees
// every event once.
func TestResumeCursor(t *testing.T) {
	t.Parallel()
	type ev struct {
		rev  uint64
		name string
	}
	// What the server holds after revision 4: the events of revisions 5
	// to 7, revision 6 being a release and the waiter's grant.
	history := []ev{{5, "acquired a"}, {6, "released a"}, {6, "acquired a by b"}, {7, "released b"}}
	from := func(after uint64) []ev {
		for i, e := range history {
			if e.rev > after {
				return history[i:]
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name   string
		breaks []int // after how many events each stream breaks
	}{
		{"no break", nil},
		{"break before any event", []int{0}},
		{"break within a revision", []int{2}},
		{"break after a whole revision", []int{3}},
		{"breaks within a revision twice", []int{2, 0, 1}},
		{"break at the first event of the resumed stream", []int{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cur := resumeCursor{after: 4}
			var got []string
			for stream := 0; ; stream++ {
				events := from(cur.after)
				if stream < len(tc.breaks) {
					events = events[:min(tc.breaks[stream], len(events))]
				}
				for _, e := range events {
					if cur.deliver(e.rev) {
						got = append(got, e.name)
					}
				}
				if stream >= len(tc.breaks) {
					break
				}
				cur.resume()
			}
			if len(got) != len(history) {
				t.Fatalf("delivered %q, want each of the %d events once", got, len(history))
			}
			for i, e := range history {
				if got[i] != e.name {
					t.Fatalf("delivered %q, want %v in order", got, history)
				}
			}
			if cur.after != 6 {
				t.Fatalf("after all events the next stream would start after %d, want 6", cur.after)
			}
		})
	}
}
