package fenceprom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencedio/fenced/fence/fenceprom"
	"github.com/fencedio/fenced/fence/fencereport"
)

var _ fenceprom.Reporter = (*fencereport.Reporter)(nil)

type fakeReporter struct{}

func (fakeReporter) Resource() string { return "orders-db" }
func (fakeReporter) Sent() uint64     { return 7 }
func (fakeReporter) Dropped() uint64  { return 2 }
func (fakeReporter) Pending() int     { return 3 }

func TestRegisterReporter(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	if err := fenceprom.RegisterReporter(reg, fakeReporter{}); err != nil {
		t.Fatal(err)
	}
	want := `# HELP fenced_reporter_dropped_total Stale rejections this reporter did not deliver: queue full, or fenced did not accept the batch.
# TYPE fenced_reporter_dropped_total counter
fenced_reporter_dropped_total{resource="orders-db"} 2
# HELP fenced_reporter_queue_entries Entries waiting to be sent.
# TYPE fenced_reporter_queue_entries gauge
fenced_reporter_queue_entries{resource="orders-db"} 3
# HELP fenced_reporter_sent_total Stale rejections fenced accepted from this reporter.
# TYPE fenced_reporter_sent_total counter
fenced_reporter_sent_total{resource="orders-db"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := fenceprom.RegisterReporter(reg, fakeReporter{}); err == nil {
		t.Error("registering the same resource twice succeeded")
	}
}
