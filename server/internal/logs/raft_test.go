package logs

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// raft's records reach the slog handler as records of their own, with the
// hclog name as module and the key-value pairs as attributes; those below
// the minimum level are dropped.
func TestRaftLoggerWritesSlogRecords(t *testing.T) {
	var buf bytes.Buffer
	l := NewRaftLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), hclog.Warn)
	l.Info("dropped: below the minimum")
	l.Warn("heartbeat timeout reached", "last-leader-id", "n2")
	l.Named("wal").With("segment", 3).Error("cannot sync", "err", "EIO")
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("from a log.Logger")
	if l.IsInfo() || !l.IsWarn() {
		t.Errorf("IsInfo %v, IsWarn %v at minimum Warn", l.IsInfo(), l.IsWarn())
	}

	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		got = append(got, rec)
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "heartbeat timeout reached", "module": "raft", "last-leader-id": "n2"},
		{"level": "ERROR", "msg": "cannot sync", "module": "raft.wal", "segment": 3.0, "err": "EIO"},
		{"level": "ERROR", "msg": "from a log.Logger", "module": "raft"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, got[i][k], v)
			}
		}
	}
}
