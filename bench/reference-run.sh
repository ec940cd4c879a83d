#!/usr/bin/env bash
# The reference run: fenced, etcd and ZooKeeper, single nodes and 3-node
# clusters, side by side, with fixed settings, so that a run on another
# machine can be set next to the one in README.md.
#
#   bench/reference-run.sh [OUTDIR]     # default: reference-YYYYMMDDTHHMMSSZ in the working directory
#
# Writes OUTDIR/report.json (every run), OUTDIR/table.md (the tables and
# the machine's description) and OUTDIR/progress.log. Needs Go, and
# ZooKeeper with a JRE (Debian: apt-get install zookeeper). About
# 7 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$PWD/reference-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The fixed settings. Change them only together with README.md's
# description of the reference run.
settings=(
	-systems fenced,fenced-3,etcd,etcd-3,zk,zk-3
	-workloads acquire-release,contended,renew,renew-stream,memory
	-clients 1,16,64,256
	-rounds 2
	-duration 4s
	-warmup 5s
	-leases 100000
)

cd "$here"
rev=$(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C .. status --porcelain 2>/dev/null)" ]; then rev="$rev (with uncommitted changes)"; fi
zkver=$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo unknown)
javaver=$(java -version 2>&1 | head -1 || echo unknown)

go build -o "$out/fencedbench" ./cmd/fencedbench
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$out/fencedbench" "${settings[@]}" -wide -json "$out/report.json" >"$out/table.md.tmp" 2> >(tee "$out/progress.log" >&2)
{
	echo "Reference run of fenced $rev, started $start: \`bench/reference-run.sh\`"
	echo "(\`fencedbench ${settings[*]}\`); etcd 3.7.3, ZooKeeper $zkver on $javaver, $(go version | cut -d' ' -f3)."
	echo
	cat "$out/table.md.tmp"
} >"$out/table.md"
rm "$out/table.md.tmp" "$out/fencedbench"
cat "$out/table.md"
echo "written: $out/table.md $out/report.json" >&2
