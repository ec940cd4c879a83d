package store_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/store"
)

func TestOwnerInAuditAndRejections(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, store.Config{Registerer: reg})
	h := fencing("jobs/1", tok(64))
	h.Set(fencehttp.HeaderOwner, "worker-B")
	if r := e.do(http.MethodPut, "/v1/objects/a", h, []byte("v")); r.status != http.StatusNoContent {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	h = fencing("jobs/1", tok(63))
	h.Set(fencehttp.HeaderOwner, "worker-A")
	if r := e.do(http.MethodPut, "/v1/objects/a", h, []byte("late")); r.status != http.StatusConflict {
		t.Fatalf("stale put: %d %s", r.status, r.body)
	}
	audit, err := e.s.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Owner != "worker-B" {
		t.Fatalf("audit %+v, want one record by worker-B", audit)
	}
	r := e.do(http.MethodGet, "/v1/rejections", nil, nil)
	var page store.RejectionsPage
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Recent) != 1 || page.Recent[0].Owner != "worker-A" || page.Recent[0].Presented != 63 || page.Recent[0].Highest != 64 {
		t.Fatalf("rejections %+v", page.Recent)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exemplar := ""
	for _, mf := range mfs {
		if mf.GetName() == "fenced_store_writes_rejected_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetCounter().GetExemplar().GetLabel() {
					exemplar += l.GetName() + "=" + l.GetValue()
				}
			}
		}
	}
	if exemplar != "owner=worker-A" {
		t.Errorf("rejected counter exemplar %q, want owner=worker-A", exemplar)
	}
	html := e.do(http.MethodGet, "/rejections", nil, nil)
	if !strings.Contains(string(html.body), "<td class=\"s\">worker-A</td>") {
		t.Errorf("rejections page does not show the owner:\n%s", html.body)
	}
}
