package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// The dashboard is plain HTML and JavaScript, so only a real browser can
// tell whether it works: these tests drive Debian's Chromium headless
// (.ci/chromium.sh installs it) against an in-process server.

const chromiumPath = "/usr/bin/chromium"

// appearWithin is how soon a transition made through the API must show on
// the dashboard.
const appearWithin = 2 * time.Second

// newBrowser starts a headless Chromium with a fresh profile and returns a
// tab context. It skips the test when Chromium is missing, unless
// FENCED_REQUIRE_SERVICES=1.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	testenv.SkipUnlessLong(t)
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("chromium not found at %s (run .ci/chromium.sh): %v", chromiumPath, err)
		if os.Getenv("FENCED_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	profile := t.TempDir() // created before the cleanup below, so removed after Chromium exits
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
	})
	// The first run starts the browser and binds it to ctx, which has no
	// deadline; the waits below use shorter contexts derived from it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// pageProblems collects uncaught exceptions and console errors of the tab
// until stop is called.
type pageProblems struct {
	mu     sync.Mutex
	list   []chromedp.ConsoleMessage
	cancel context.CancelFunc
	done   chan struct{}
}

func watchConsole(ctx context.Context) *pageProblems {
	cctx, cancel := context.WithCancel(ctx)
	p := &pageProblems{cancel: cancel, done: make(chan struct{})}
	msgs := chromedp.Console(cctx)
	go func() {
		defer close(p.done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				p.mu.Lock()
				p.list = append(p.list, m)
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// stop stops collecting and returns the problems, but those that excused
// (if not nil) says are no fault of the page.
func (p *pageProblems) stop(excused func(chromedp.ConsoleMessage) bool) []string {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	var list []string
	for _, m := range p.list {
		if excused == nil || !excused(m) {
			list = append(list, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
		}
	}
	return list
}

// refusedBetween excuses the browser's own reports of fetches from base
// that were refused between from and to: while a server restarts, the
// page's stream and polls meet a closed port. Nothing else is excused: not
// another network error, nor one outside the window, nor what the page
// itself logs or throws.
func refusedBetween(base string, from, to time.Time) func(chromedp.ConsoleMessage) bool {
	return func(m chromedp.ConsoleMessage) bool {
		return m.Type == chromedp.ConsoleError && m.Source == "network" &&
			strings.Contains(m.Text, "net::ERR_CONNECTION_REFUSED") && strings.HasPrefix(m.URL, base+"/") &&
			!m.Time.Before(from) && !m.Time.After(to)
	}
}

// dashLease is the proto3 JSON of a lease; 64-bit fields are strings.
type dashLease struct {
	Key     string `json:"key"`
	LeaseID string `json:"leaseId"`
	Owner   string `json:"owner"`
	Token   string `json:"token"`
}

// dashPost calls a LeaseService method with a JSON body and decodes the
// answer into out.
func dashPost(t *testing.T, base, method string, in, out any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/fenced.v1.LeaseService/"+method, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read answer: %v", method, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d: %s", method, body, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decode %s: %v", method, raw, err)
	}
}

func dashAcquire(t *testing.T, base, key, owner string, ttl time.Duration) dashLease {
	t.Helper()
	var resp struct {
		Lease dashLease `json:"lease"`
	}
	dashPost(t, base, "Acquire", map[string]any{"key": key, "owner": owner, "ttlMs": ttl.Milliseconds()}, &resp)
	if resp.Lease.Key != key || resp.Lease.Owner != owner || resp.Lease.Token == "" || resp.Lease.LeaseID == "" {
		t.Fatalf("Acquire %q as %q: unexpected lease %+v", key, owner, resp.Lease)
	}
	return resp.Lease
}

func dashRelease(t *testing.T, base string, l dashLease) {
	t.Helper()
	var resp struct{}
	dashPost(t, base, "Release", map[string]any{"key": l.Key, "leaseId": l.LeaseID}, &resp)
}

func rowSel(key string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`#leases tr[data-key=%q]`, key))
}

func epochSel(key, token, status string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`#timeline li.epoch[data-key=%q][data-token=%q][data-status=%q]`, key, token, status))
}

// within runs act and then waits, on a deadline of d counted from before
// act, until wait succeeds.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, act func(), wait chromedp.Action[chromedp.Void]) {
	t.Helper()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if act != nil {
		act()
	}
	if err := chromedp.Do(wctx, wait); err != nil {
		t.Fatalf("%s: not seen within %v: %v; the page shows:\n%s", what, d, err, pageState(ctx))
	}
	t.Logf("%s: seen after %v", what, time.Since(start).Round(time.Millisecond))
}

// pageState describes what the page shows of the connection, the leases
// and the epochs, for a failure message.
func pageState(ctx context.Context) string {
	const js = `[
		document.getElementById("conn")?.outerHTML ?? "no #conn",
		...[...document.querySelectorAll("#leases tr[data-key]")].map(r =>
			"row " + JSON.stringify(Object.assign({}, r.dataset))),
		...[...document.querySelectorAll("#timeline li.epoch")].map(e =>
			"epoch " + JSON.stringify(Object.assign({}, e.dataset))),
	].join("\n")`
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		return fmt.Sprintf("(page state not read: %v)", err)
	}
	return s
}

// shown checks, without waiting, whether sel is on show (present and not
// hidden) as want says. Parts of the page drawn by the same event as one
// already seen must be there at once: waiting for them again would only
// measure how fast the browser answers on a loaded machine.
func shown(t *testing.T, ctx context.Context, what string, sel chromedp.CSS, want bool) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.getClientRects().length > 0 })()`, string(sel))
	got, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Fatalf("%s: on show %v, want %v with the part drawn by the same event", what, got, want)
	}
}

func text(t *testing.T, ctx context.Context, sel chromedp.CSS) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// screenshot saves a full-page PNG under each of dirs and checks that it
// is a PNG of the expected width.
func screenshot(t *testing.T, ctx context.Context, wantWidth int, name string, dirs ...string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(buf))
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	if cfg.Width != wantWidth {
		t.Errorf("screenshot %s is %d px wide, want %d", name, cfg.Width, wantWidth)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatalf("save screenshot: %v", err)
		}
		t.Logf("screenshot %dx%d: %s", cfg.Width, cfg.Height, p)
	}
}

func TestDashboardBrowser(t *testing.T) {
	ctx := newBrowser(t)
	srv := fencedtest.Start(t)
	problems := watchConsole(ctx)

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open dashboard: %v", err)
	}
	// Live means the snapshot has arrived, so what follows comes as events.
	within(t, ctx, 10*time.Second, "event stream connected", nil,
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)))
	if got := text(t, ctx, chromedp.CSS("#leases-empty")); got != "No leases held." {
		t.Errorf("empty table says %q", got)
	}

	// A grant appears with its owner and token.
	const orders = "orders/7"
	var a dashLease
	within(t, ctx, appearWithin, "acquired row", func() {
		a = dashAcquire(t, srv.URL, orders, "alice", time.Minute)
	}, chromedp.WaitVisible(rowSel(orders)))
	if got := text(t, ctx, rowSel(orders)+" td.owner"); got != "alice" {
		t.Errorf("owner cell = %q, want alice", got)
	}
	if got := text(t, ctx, rowSel(orders)+" td.token"); got != a.Token {
		t.Errorf("token cell = %q, want %q", got, a.Token)
	}
	if got := text(t, ctx, rowSel(orders)+" td.expires .left"); got == "" || got == "due" {
		t.Errorf("expires cell of a fresh one-minute lease = %q", got)
	}
	shown(t, ctx, "current epoch", epochSel(orders, a.Token, "current"), true)

	// A lease left to expire, then taken over by someone else.
	const nightly = "jobs/nightly"
	b := dashAcquire(t, srv.URL, nightly, "bob", 150*time.Millisecond)
	within(t, ctx, 5*time.Second, "expired epoch", nil, chromedp.WaitVisible(epochSel(nightly, b.Token, "expired")))
	shown(t, ctx, "expired row removed", rowSel(nightly), false)
	var c dashLease
	within(t, ctx, appearWithin, "takeover row", func() {
		c = dashAcquire(t, srv.URL, nightly, "carol", time.Minute)
	}, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`%s[data-owner="carol"]`, rowSel(nightly)))))
	shown(t, ctx, "takeover epoch", epochSel(nightly, c.Token, "current")+`[data-takeover="true"]`, true)

	// A release removes the row and closes the epoch.
	within(t, ctx, appearWithin, "released row removed", func() {
		dashRelease(t, srv.URL, a)
	}, chromedp.WaitNotPresent(rowSel(orders)))
	shown(t, ctx, "released epoch", epochSel(orders, a.Token, "released"), true)
	if got := text(t, ctx, epochSel(orders, a.Token, "released")+" .own"); got != "alice" {
		t.Errorf("released epoch owner = %q, want alice", got)
	}

	// The counters follow /v1/stats: 3 grants, 1 release, 1 expiry, 1 takeover.
	counters := []struct {
		id   string
		want uint64
	}{
		{"stat-leases", 1},
		{"stat-acquired", 3},
		{"stat-released", 1},
		{"stat-expired", 1},
		{"stat-takeovers", 1},
		{"stat-waiters", 0},
	}
	for _, ctr := range counters {
		within(t, ctx, 5*time.Second, ctr.id, nil,
			chromedp.WaitReady(chromedp.CSS(fmt.Sprintf(`#%s[data-value="%d"]`, ctr.id, ctr.want))))
	}
	if st := srv.Stats(); st.Acquired != 3 || st.Released != 1 || st.Expired != 1 || st.Takeovers != 1 {
		t.Errorf("server stats = %+v, want 3 acquired, 1 released, 1 expired, 1 takeover", st)
	}

	// Screenshots for people: a laptop and a phone.
	dirs := []string{os.TempDir()}
	if d := os.Getenv("FENCED_SCREENSHOT_DIR"); d != "" {
		dirs = append(dirs, d)
	} else {
		dirs = append(dirs, t.TempDir())
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, 1280, "fenced-dashboard.png", dirs...)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(375, 812, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatal(err)
	}
	if w, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); err != nil {
		t.Fatal(err)
	} else if w > 375 {
		t.Errorf("page is %d px wide on a 375 px phone: it scrolls sideways", w)
	}
	screenshot(t, ctx, 750, "fenced-dashboard-phone.png", dirs...)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}

	// The prefix filter narrows the table to the keys under it.
	d := dashAcquire(t, srv.URL, "orders/8", "dave", time.Minute)
	within(t, ctx, appearWithin, "second orders row", nil, chromedp.WaitVisible(rowSel(d.Key)))
	within(t, ctx, 5*time.Second, "filtered to jobs/", func() {
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("prefix"), "jobs/\n")); err != nil {
			t.Fatal(err)
		}
	}, chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitNotPresent(rowSel(d.Key)),
		chromedp.WaitVisible(rowSel(nightly)),
		chromedp.WaitNotVisible(chromedp.CSS(fmt.Sprintf(`#timeline section[data-key=%q]`, orders))),
	))

	if p := problems.stop(nil); len(p) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(p, "\n"))
	}
}

// TestDashboardBrowserReconnect checks that the page finds its feet again
// after the server restarts, and that what ended while a key was not watched
// shows as ended unseen rather than as still held.
func TestDashboardBrowserReconnect(t *testing.T) {
	ctx := newBrowser(t)
	srv := fencedtest.Start(t)
	problems := watchConsole(ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("open dashboard: %v", err)
	}
	snapshots := func(n int) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#conn[data-state="live"][data-snapshots="%d"]`, n)))
	}
	within(t, ctx, 10*time.Second, "event stream connected", nil, snapshots(1))

	const key = "orders/9"
	var a dashLease
	within(t, ctx, appearWithin, "acquired row", func() {
		a = dashAcquire(t, srv.URL, key, "erin", time.Minute)
	}, chromedp.WaitVisible(rowSel(key)))

	// Leases survive a restart; the page reconnects on its own and keeps
	// showing the same epoch.
	down := time.Now()
	srv = srv.Restart(t)
	within(t, ctx, 10*time.Second, "reconnected after restart", nil, chromedp.Steps(
		snapshots(2),
		chromedp.WaitVisible(rowSel(key)+chromedp.CSS(fmt.Sprintf(`[data-token=%q]`, a.Token))),
		chromedp.WaitVisible(epochSel(key, a.Token, "current")),
	))
	refused := refusedBetween(srv.URL, down, time.Now())

	// Look away from the key, let it go, look back: the page cannot know how
	// the epoch ended.
	filter := func(prefix string) {
		js := fmt.Sprintf(`document.getElementById("prefix").value = %q; document.getElementById("filter").requestSubmit()`, prefix)
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](js)); err != nil {
			t.Fatalf("filter %q: %v", prefix, err)
		}
	}
	within(t, ctx, 5*time.Second, "filtered away", func() { filter("jobs/") }, chromedp.Steps(
		snapshots(3),
		chromedp.WaitNotPresent(rowSel(key)),
	))
	dashRelease(t, srv.URL, a)
	within(t, ctx, 5*time.Second, "epoch ended unseen", func() { filter("") }, chromedp.Steps(
		snapshots(4),
		chromedp.WaitVisible(epochSel(key, a.Token, "unknown")),
	))
	if got := text(t, ctx, epochSel(key, a.Token, "unknown")+" .how"); got != "ended unseen" {
		t.Errorf("epoch status text = %q, want %q", got, "ended unseen")
	}
	if p := problems.stop(refused); len(p) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(p, "\n"))
	}
}
