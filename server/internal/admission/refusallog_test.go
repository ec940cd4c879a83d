package admission

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Refusals are logged once per RefusalLogEvery, the next record counting
// those left out since the last.
func TestRefusalLogThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
		var r RefusalLog
		for range 3 {
			r.Log(log, "192.0.2.9", false, 4)
		}
		time.Sleep(RefusalLogEvery - time.Nanosecond)
		r.Log(log, "192.0.2.9", false, 4)
		time.Sleep(time.Nanosecond)
		r.Log(log, "192.0.2.10", false, 4)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("%d records, want 2:\n%s", len(lines), buf.String())
		}
		for i, want := range []string{
			`level=WARN msg="connection refused: too many open from its address" limit=max-conns-per-client client=192.0.2.9 max=4 refused_since_last_record=0`,
			`level=WARN msg="connection refused: too many open from its address" limit=max-conns-per-client client=192.0.2.10 max=4 refused_since_last_record=3`,
		} {
			if lines[i] != want {
				t.Errorf("record %d:\n%s\nwant\n%s", i, lines[i], want)
			}
		}
	})
}
