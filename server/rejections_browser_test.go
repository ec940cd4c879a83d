package server_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// TestDashboardShowsRejection reports a stale rejection of worker-A's
// epoch of jobs/invoices and checks that the dashboard shows it on that
// epoch, and on no other epoch or key, counts it and lists it.
func TestDashboardShowsRejection(t *testing.T) {
	ctx := newBrowser(t)
	srv := fencedtest.Start(t)
	fc := srv.Client(t, client.Config{})
	problems := watchConsole(ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open dashboard: %v", err)
	}
	within(t, ctx, 10*time.Second, "event stream connected", nil,
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)))

	const key, other = "jobs/invoices", "jobs/payroll"
	a := dashAcquire(t, srv.URL, key, "worker-A", 150*time.Millisecond)
	within(t, ctx, 5*time.Second, "A's epoch expired", nil, chromedp.WaitVisible(epochSel(key, a.Token, "expired")))
	b := dashAcquire(t, srv.URL, key, "worker-B", time.Minute)
	c := dashAcquire(t, srv.URL, other, "worker-C", time.Minute)
	within(t, ctx, appearWithin, "B's epoch", nil, chromedp.WaitVisible(epochSel(key, b.Token, "current")))
	within(t, ctx, appearWithin, "C's epoch", nil, chromedp.WaitVisible(epochSel(other, c.Token, "current")))

	presented, _ := strconv.ParseUint(a.Token, 10, 64)
	highest, _ := strconv.ParseUint(b.Token, 10, 64)
	rejSel := epochSel(key, a.Token, "expired") + " .rej"
	within(t, ctx, 3*appearWithin, "rejection on A's epoch", func() {
		if _, err := fc.ReportRejections(t.Context(), []client.StaleRejection{{Scope: key, Presented: presented,
			Highest: highest, Owner: "worker-A", Resource: "ledger-http", Count: 3}}); err != nil {
			t.Fatal(err)
		}
	}, chromedp.WaitVisible(rejSel))
	want := fmt.Sprintf("worker-A's token %s refused 3× by ledger-http after worker-B's %s", a.Token, b.Token)
	if got := text(t, ctx, rejSel); got != want {
		t.Errorf("A's epoch says %q, want %q", got, want)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#timeline .rej').length`))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d rejection marks in the timeline, want only the one on A's epoch", n)
	}
	if got := text(t, ctx, chromedp.CSS("#stat-rejections")); got != "3" {
		t.Errorf("rejection counter %q, want 3", got)
	}
	item := chromedp.CSS(fmt.Sprintf(`#rejections li.rejection[data-key=%q][data-token=%q] .what`, key, a.Token))
	if got := text(t, ctx, item); got != key+": "+want {
		t.Errorf("list entry %q", got)
	}
	dirs := []string{t.TempDir()}
	if d := os.Getenv("FENCED_SCREENSHOT_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	screenshot(t, ctx, 1280, "fenced-dashboard-rejection.png", dirs...)
	if p := problems.stop(nil); len(p) > 0 {
		t.Errorf("page problems: %q", p)
	}
}
