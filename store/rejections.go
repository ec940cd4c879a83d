package store

import (
	"html/template"
	"net/http"
	"sync"
	"time"
)

// recentRejections is how many stale rejections the store keeps for
// GET /rejections.
const recentRejections = 100

// Rejection is one stale write the store refused.
type Rejection struct {
	Time      time.Time `json:"time"`
	Scope     string    `json:"scope"`
	Presented uint64    `json:"presentedToken"`
	Highest   uint64    `json:"highestToken"`
	Object    string    `json:"object"`
	Op        Op        `json:"op"`
	// Owner is the lease owner the refused write came with; empty when none.
	Owner string `json:"owner,omitempty"`
}

// rejectionLog is a fixed-size ring of the newest rejections.
type rejectionLog struct {
	mu   sync.Mutex
	buf  []Rejection
	next int // index the next add writes
	full bool
}

func newRejectionLog(n int) *rejectionLog { return &rejectionLog{buf: make([]Rejection, n)} }

func (l *rejectionLog) add(r Rejection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf[l.next] = r
	l.next = (l.next + 1) % len(l.buf)
	if l.next == 0 {
		l.full = true
	}
}

// list returns the rejections newest first.
func (l *rejectionLog) list() []Rejection {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.buf)
	}
	out := make([]Rejection, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, l.buf[(l.next-i+len(l.buf))%len(l.buf)])
	}
	return out
}

var rejectionsPage = template.Must(template.New("rejections").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fenced store: stale rejections</title>
<style>
body{font-family:system-ui,sans-serif;margin:1rem;color:#222;background:#fff}
h1{font-size:1.3rem;margin:0 0 .5rem}
p{margin:.3rem 0 1rem;color:#555}
.warn{color:#b00;font-weight:bold}
.wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #ddd;white-space:nowrap}
td.s{white-space:normal;word-break:break-all}
td.n{text-align:right;font-variant-numeric:tabular-nums}
</style>
</head>
<body>
<h1>Stale fencing tokens rejected</h1>
{{if .NoFencing}}<p class="warn">Fencing is disabled on this store: stale tokens are accepted, so nothing is rejected here.</p>{{end}}
<p>{{.Count}} rejected since start; the {{len .Recent}} most recent, newest first. Kept in memory only.</p>
{{if .Recent}}<div class="wrap"><table>
<thead><tr><th>time (UTC)</th><th>scope</th><th>object</th><th>op</th><th>owner</th><th>presented</th><th>highest</th></tr></thead>
<tbody>
{{range .Recent}}<tr><td>{{.Time.Format "2006-01-02 15:04:05.000"}}</td><td class="s">{{.Scope}}</td><td class="s">{{.Object}}</td><td>{{.Op}}</td><td class="s">{{.Owner}}</td><td class="n">{{.Presented}}</td><td class="n">{{.Highest}}</td></tr>
{{end}}</tbody>
</table></div>{{else}}<p>None yet.</p>{{end}}
</body>
</html>
`))

func (s *Store) serveRejectionsPage(w http.ResponseWriter, r *http.Request) {
	data := struct {
		NoFencing bool
		Count     uint64
		Recent    []Rejection
	}{s.cfg.NoFencing, s.RejectionCount(), s.Rejections()}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := rejectionsPage.Execute(w, data); err != nil {
		s.log.ErrorContext(r.Context(), "render rejections page", "error", err)
	}
}
