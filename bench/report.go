package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes the report as a Markdown table, the memory line and
// notes on what each row measures.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if len(r.Rows) > 0 {
		fmt.Fprintf(&b, "Medians of %d round(s) of %gs per workload and system; ratio = fenced ops/s ÷ etcd ops/s.\n\n", r.Rounds, r.Seconds)
		b.WriteString("| workload | clients | fenced ops/s | etcd ops/s | fenced/etcd | fenced p50 / p99 | etcd p50 / p99 |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Rows {
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %s | %s / %s | %s / %s |\n",
				row.Title, row.Clients, row.Fenced.OpsPerSec, row.Etcd.OpsPerSec, fmtRatio(row.Ratio),
				fmtMs(row.Fenced.P50Ms), fmtMs(row.Fenced.P99Ms), fmtMs(row.Etcd.P50Ms), fmtMs(row.Etcd.P99Ms))
		}
		b.WriteString("\n")
		seen := map[string]bool{}
		for _, row := range r.Rows {
			if seen[row.Workload] {
				continue
			}
			seen[row.Workload] = true
			fmt.Fprintf(&b, "- %s: op = %s; latency = %s.\n", row.Title, row.Op, row.Latency)
		}
		for _, row := range r.Rows {
			if row.Fenced.Errors+row.Etcd.Errors > 0 {
				fmt.Fprintf(&b, "- errors in %s, %d clients: fenced %d, etcd %d (see -json for the first of each).\n",
					row.Title, row.Clients, row.Fenced.Errors, row.Etcd.Errors)
			}
		}
		if r.FencedRSSAfterRuns > 0 && r.EtcdRSSAfterRuns > 0 {
			fmt.Fprintf(&b, "- RSS after the throughput runs: fenced %s, etcd %s.\n", fmtBytes(r.FencedRSSAfterRuns), fmtBytes(r.EtcdRSSAfterRuns))
		}
	}
	if m := r.Memory; m != nil {
		if len(r.Rows) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Memory: fenced RSS (VmRSS) with %d live leases: **%s** (idle before: %s, peak: %s; %.0f bytes per lease over idle; created in %.1fs, %.0f/s",
			m.Created, fmtBytes(m.RSS), fmtBytes(m.IdleRSS), fmtBytes(m.PeakRSS), m.BytesPerLease, m.CreateSeconds, float64(m.Created)/m.CreateSeconds)
		if m.ActiveGauge > 0 {
			fmt.Fprintf(&b, "; fenced_leases_active %d", m.ActiveGauge)
		}
		if m.Errors > 0 {
			fmt.Fprintf(&b, "; %d acquisitions failed, first: %s", m.Errors, m.FirstError)
		}
		b.WriteString(").\n")
	}
	fmt.Fprintf(&b, "\nTotal wall time %.0fs.\n", r.TotalSeconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report, every run included, as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 1:
		return fmt.Sprintf("%.2fms", v)
	case v < 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.0fms", v)
	}
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
