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
	fmt.Fprintf(&b, "Machine: %s.\n\n", r.Machine)
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
	r.writeMemory(&b)
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

// writeMemory writes a line for each memory result.
func (r *Report) writeMemory(b *strings.Builder) {
	for _, m := range r.Memory {
		fmt.Fprintf(b, "\nMemory: %s RSS (VmRSS) with %d live leases (ZooKeeper: held locks): **%s** (idle before: %s, peak: %s; %.0f bytes per lease over idle; created in %.1fs, %.0f/s",
			m.System, m.Created, fmtBytes(m.RSS), fmtBytes(m.IdleRSS), fmtBytes(m.PeakRSS), m.BytesPerLease, m.CreateSeconds, float64(m.Created)/m.CreateSeconds)
		if m.ActiveGauge > 0 {
			fmt.Fprintf(b, "; live by the server's count %d", m.ActiveGauge)
		}
		if m.HeapAfterGC > 0 {
			fmt.Fprintf(b, "; JVM heap used after a full GC %s, %.0f bytes per lock", fmtBytes(m.HeapAfterGC), float64(m.HeapAfterGC)/float64(max(m.Created, 1)))
		}
		if m.Errors > 0 {
			fmt.Fprintf(b, "; %d acquisitions failed, first: %s", m.Errors, m.FirstError)
		}
		b.WriteString(").\n")
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

// WriteWide writes the report with the systems side by side: the
// machine, one table of ops/s and one of server CPU per operation (a row
// per workload and client count, a column per system), then the ratios of
// each fenced system to the etcd and ZooKeeper of its size, and the
// memory lines.
func (r *Report) WriteWide(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s.\n\n", r.Machine)
	fmt.Fprintf(&b, "Medians of %d round(s) of %gs per workload and system; ops/s (contended handoff: and the median handoff gap).\n\n", r.Rounds, r.Seconds)
	type pair struct{ a, b string }
	var pairs []pair
	for _, a := range r.Systems {
		spec, _ := specByName(a)
		if spec.etcd || spec.zk {
			continue
		}
		for _, other := range r.Systems {
			o, _ := specByName(other)
			if (o.etcd || o.zk) && o.nodes == spec.nodes {
				pairs = append(pairs, pair{a, other})
			}
		}
	}
	header := func(extra []string) {
		b.WriteString("| workload | clients |")
		for _, s := range r.Systems {
			b.WriteString(" " + s + " |")
		}
		for _, e := range extra {
			b.WriteString(" " + e + " |")
		}
		b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(r.Systems)+len(extra)) + "\n")
	}
	find := func(row Row, name string) (SystemMedian, bool) {
		for _, s := range row.Systems {
			if s.System == name {
				return s, true
			}
		}
		return SystemMedian{}, false
	}
	table := func(cell func(Row, SystemMedian) string, ratio func(a, b SystemMedian) float64, ratioName string) {
		var extra []string
		for _, p := range pairs {
			extra = append(extra, fmt.Sprintf("%s %s %s", p.a, ratioName, p.b))
		}
		header(extra)
		for _, row := range r.Rows {
			fmt.Fprintf(&b, "| %s | %d |", row.Title, row.Clients)
			for _, name := range r.Systems {
				if s, ok := find(row, name); ok {
					b.WriteString(" " + cell(row, s) + " |")
				} else {
					b.WriteString(" - |")
				}
			}
			for _, p := range pairs {
				sa, okA := find(row, p.a)
				sb, okB := find(row, p.b)
				if okA && okB {
					b.WriteString(" " + fmtRatio(ratio(sa, sb)) + " |")
				} else {
					b.WriteString(" - |")
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	table(func(row Row, s SystemMedian) string {
		if row.Workload == "contended" {
			return fmt.Sprintf("%s (%s)", fmtCount(s.OpsPerSec), fmtMs(s.P50Ms))
		}
		return fmtCount(s.OpsPerSec)
	}, func(a, b SystemMedian) float64 { return div(a.OpsPerSec, b.OpsPerSec) }, "/")
	b.WriteString("Server CPU per operation (all server processes, from /proc/PID/stat); the ratios divide fenced's by the other's (below 1: fenced spent less).\n\n")
	table(func(_ Row, s SystemMedian) string { return fmtUs(s.ServerCPUPerOpUs) },
		func(a, b SystemMedian) float64 { return div(a.ServerCPUPerOpUs, b.ServerCPUPerOpUs) }, "÷")
	r.writeNotes(&b)
	r.writeMemory(&b)
	fmt.Fprintf(&b, "\nTotal wall time %.0fs.\n", r.TotalSeconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtCount writes n with thousands separators.
func fmtCount(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
