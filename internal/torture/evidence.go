package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/torture/check"
	"github.com/fencedio/fenced/internal/torture/history"
	"github.com/fencedio/fenced/internal/torture/proc"
	"github.com/fencedio/fenced/internal/torture/worker"
	"github.com/fencedio/fenced/store"
)

// collect reads what the resources hold: the store's audit log and final
// objects, the PostgreSQL writes table, the Redis audit lists and the
// queue path's table and decisions.
func (e *engine) collect(ctx context.Context, h *history.History, delayed []history.DelayedWrite) (*check.Evidence, error) {
	ev := &check.Evidence{Delayed: delayed, Objects: map[string]check.FinalObject{}}
	hc := &http.Client{Timeout: 10 * time.Second}
	audit, err := readAudit(ctx, hc, e.storeURL, e.cfg.KeyPrefix)
	if err != nil {
		return nil, err
	}
	ev.Audit = audit
	var names []string
	for _, op := range h.Ops {
		if op.Kind == history.KindPut && op.Outcome == history.OK {
			names = append(names, op.Object)
		}
	}
	for _, d := range delayed {
		if d.Status/100 == 2 {
			names = append(names, d.Object)
		}
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				obj, err := readObject(ctx, hc, e.storeURL, name)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ev.Objects[name] = obj
				}
				mu.Unlock()
			}
		}()
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("torture: reading objects back: %w", errors.Join(errs[:min(len(errs), 3)]...))
	}
	if e.db != nil {
		ev.HasSQL = true
		rows, err := e.db.QueryContext(ctx, `SELECT id, scope, token, worker, object, seq FROM `+worker.QuoteIdent(e.writeTable)+` ORDER BY id`)
		if err != nil {
			return nil, fmt.Errorf("torture: postgres: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r check.SQLRow
			var tok, seq int64
			if err := rows.Scan(&r.ID, &r.Scope, &tok, &r.Worker, &r.Object, &seq); err != nil {
				return nil, fmt.Errorf("torture: postgres: %w", err)
			}
			r.Token, r.Sequence = uint64(tok), uint64(seq)
			ev.SQLRows = append(ev.SQLRows, r)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("torture: postgres: %w", err)
		}
	}
	if e.q != nil {
		if ev.Queue, err = e.readQueue(ctx); err != nil {
			return nil, err
		}
	}
	if e.rdb != nil {
		ev.HasRedis = true
		if ev.Redis, err = e.readRedis(ctx); err != nil {
			return nil, err
		}
	}
	return ev, nil
}

// readAudit pages through GET /v1/audit and keeps the records of the run's
// scopes (a shared store also holds other writes).
func readAudit(ctx context.Context, hc *http.Client, base, prefix string) ([]store.AuditRecord, error) {
	var out []store.AuditRecord
	var after uint64
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/audit?after=%d&limit=10000", base, after), nil)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("torture: read audit: %w", err)
		}
		var page store.AuditPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("torture: read audit: HTTP %d: %v", resp.StatusCode, err)
		}
		if len(page.Records) == 0 {
			return out, nil
		}
		for _, r := range page.Records {
			if strings.HasPrefix(r.Scope, prefix) {
				out = append(out, r)
			}
		}
		after = page.Next
	}
}

func readObject(ctx context.Context, hc *http.Client, base, name string) (check.FinalObject, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/objects/"+url.PathEscape(name), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return check.FinalObject{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return check.FinalObject{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		tok, err := strconv.ParseUint(resp.Header.Get(fencehttp.HeaderToken), 10, 64)
		if err != nil {
			return check.FinalObject{}, fmt.Errorf("object %q: bad token header: %w", name, err)
		}
		return check.FinalObject{Present: true, Token: tok, Value: body}, nil
	case http.StatusNotFound:
		return check.FinalObject{}, nil
	}
	return check.FinalObject{}, fmt.Errorf("object %q: HTTP %d", name, resp.StatusCode)
}

// snapshotCounts sums, over the processes logged in a node's log, the last
// statsPrefix line of each: counts restart with every process.
func snapshotCounts(logPath string) (taken, restored int) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0
	}
	var t, r int
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "--- torture: starting ") {
			taken, restored, t, r = taken+t, restored+r, 0, 0
			continue
		}
		if rest, ok := strings.CutPrefix(line, proc.StatsPrefix); ok {
			fmt.Sscanf(rest, "snapshots=%d restores=%d", &t, &r)
		}
	}
	return taken + t, restored + r
}
