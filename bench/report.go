package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes the report as a Markdown table (one line per
// workload, client count and system), the memory lines and notes on what
// each row measures.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if len(r.Rows) > 0 {
		fmt.Fprintf(&b, "Medians of %d round(s) of %gs per workload and system. \"vs etcd\" divides by the etcd of the same size "+
			"(single node: etcd; 3 nodes: etcd-3): ops/s over its ops/s, CPU per operation over its CPU per operation. "+
			"Server CPU: all server processes, from /proc/PID/stat; client CPU: the harness process (clients and load generator), from getrusage.\n\n",
			r.Rounds, r.Seconds)
		b.WriteString("| workload | clients | system | ops/s | vs etcd | p50 / p99 | server CPU/op | vs etcd | client CPU/op | vs etcd |\n")
		b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, row := range r.Rows {
			for _, s := range row.Systems {
				fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %s | %s / %s | %s | %s | %s | %s |\n",
					row.Title, row.Clients, s.System, s.OpsPerSec, fmtRatio(s.Ratio), fmtMs(s.P50Ms), fmtMs(s.P99Ms),
					fmtUs(s.ServerCPUPerOpUs), fmtRatio(s.ServerCPURatio), fmtUs(s.ClientCPUPerOpUs), fmtRatio(s.ClientCPURatio))
			}
		}
		b.WriteString("\n")
		r.writeNotes(&b)
	}
	for _, m := range r.Memory {
		fmt.Fprintf(&b, "\nMemory: %s RSS (VmRSS) with %d live leases: **%s** (idle before: %s, peak: %s; %.0f bytes per lease over idle; created in %.1fs, %.0f/s",
			m.System, m.Created, fmtBytes(m.RSS), fmtBytes(m.IdleRSS), fmtBytes(m.PeakRSS), m.BytesPerLease, m.CreateSeconds, float64(m.Created)/m.CreateSeconds)
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

// writeNotes writes what each workload measures, the errors and the RSS
// after the runs.
func (r *Report) writeNotes(b *strings.Builder) {
	seen := map[string]bool{}
	for _, row := range r.Rows {
		if seen[row.Workload] {
			continue
		}
		seen[row.Workload] = true
		fmt.Fprintf(b, "- %s: op = %s; latency = %s.\n", row.Title, row.Op, row.Latency)
	}
	for _, row := range r.Rows {
		for _, s := range row.Systems {
			if s.Errors > 0 {
				fmt.Fprintf(b, "- errors in %s, %d clients, %s: %d (see -json for the first).\n", row.Title, row.Clients, s.System, s.Errors)
			}
		}
	}
	if len(r.RSSAfterRuns) > 0 {
		var parts []string
		for _, name := range r.Systems {
			if rss, ok := r.RSSAfterRuns[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", name, fmtBytes(rss)))
			}
		}
		fmt.Fprintf(b, "- RSS after the throughput runs (largest node of a cluster): %s.\n", strings.Join(parts, ", "))
	}
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

func fmtUs(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", v)
}

func fmtBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
