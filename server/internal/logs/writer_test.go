package logs

import (
	"strings"
	"testing"

	"github.com/fencedio/fenced/internal/testutil"
)

func TestLogWriterGathersBetweenGatherAndFlush(t *testing.T) {
	var out testutil.SyncBuffer
	lw := NewWriter(&out)

	lw.Write([]byte("a\n"))
	if got := out.Writes(); len(got) != 1 || got[0] != "a\n" {
		t.Fatalf("outside a batch: writes %q, want one write %q", got, "a\n")
	}
	lw.Gather()
	for _, s := range []string{"b\n", "c\n", "d\n"} {
		if n, err := lw.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := out.Writes(); len(got) != 1 {
		t.Fatalf("during a batch: %d writes reached the output, want none after the first", len(got)-1)
	}
	lw.Flush()
	if got := out.Writes(); len(got) != 2 || got[1] != "b\nc\nd\n" {
		t.Fatalf("after flush: writes %q, want the batch as one write %q", got, "b\nc\nd\n")
	}
	lw.Flush() // nothing kept: no empty write
	lw.Write([]byte("e\n"))
	if got := out.Writes(); len(got) != 3 || got[2] != "e\n" {
		t.Fatalf("after the batch: writes %q, want %q written at once", got, "e\n")
	}

	var nilWriter *Writer // Config.LogOutput unset
	nilWriter.Gather()
	nilWriter.Flush()
}

func TestLogWriterWritesALargeBatchEarly(t *testing.T) {
	var out testutil.SyncBuffer
	lw := NewWriter(&out)
	lw.Gather()
	record := []byte(strings.Repeat("x", 1023) + "\n")
	for range logBatchLimit / len(record) {
		lw.Write(record)
	}
	got := out.Writes()
	if len(got) != 1 || len(got[0]) != logBatchLimit {
		t.Fatalf("%d writes before flush, want one of %d bytes once the limit is reached", len(got), logBatchLimit)
	}
	lw.Write(record)
	lw.Flush()
	if got := out.Writes(); len(got) != 2 || got[1] != string(record) {
		t.Fatalf("after flush: %d writes, want the rest as a second write", len(got))
	}
}
