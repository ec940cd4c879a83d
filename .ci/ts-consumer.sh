#!/usr/bin/env bash
# Follows sdk/typescript/README.md, section "Use it from a clone", in an
# empty directory, as a new user would: its shell commands (with the clone's
# path and a temporary project directory put in for /path/to/...), its
# tsconfig.json and its main.ts, against a fenced built from this clone.
# The example of its section "Queued messages" is type-checked there too,
# with the optional peers it imports. Then compiles both with the oldest
# TypeScript the README states (5.2). Any failure, or output other than the
# program's, fails.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
readme=$repo/sdk/typescript/README.md
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work" "$repo"/sdk/typescript/fenced-client-*.tgz
}
trap cleanup EXIT

# Code block $2 (counted from 0) of the README's section "## $1".
section_block() {
  awk -v head="## $1" -v want="$2" '
    $0 == head { sec = 1; next }
    sec && /^## / { exit }
    sec && /^```/ { if (inb) { inb = 0; n++ } else { inb = 1 }; next }
    sec && inb && n == want' "$readme"
}
# The section's code blocks, counted from 0: the commands, tsconfig.json, main.ts.
block() { section_block "Use it from a clone" "$1"; }
app=$work/app
mkdir -p "$app"
block 1 >"$app/tsconfig.json"
block 2 >"$app/main.ts"
# The section "Queued messages": its example, type-checked with the same
# tsconfig.json (it talks to brokers, so it is not run).
section_block "Queued messages" 0 >"$app/messages.ts"
printf '{"extends": "./tsconfig.json", "compilerOptions": {"noEmit": true}, "files": ["messages.ts"]}\n' >"$app/tsconfig.messages.json"
cmds=$(block 0 | sed "s|/path/to/fenced|$repo|g; s|/path/to/your-project|$app|g")
for f in tsconfig.json main.ts messages.ts; do
  [ -s "$app/$f" ] || { echo "ts-consumer: no $f in $readme" >&2; exit 1; }
done
[ -n "$cmds" ] || { echo "ts-consumer: no commands in $readme" >&2; exit 1; }

# The README states Node 20 or later: an older node fails here, loudly.
node -e 'const m = +process.versions.node.split(".")[0]; if (m < 20) { console.error(`ts-consumer: node ${process.version}, the README says 20 or later`); process.exit(1); }'
echo "node $(node --version), npm $(npm --version)"

# A fenced from this clone on free loopback ports.
go build -o "$work/fenced" ./cmd/fenced
read -r port raft < <(node -e '
  const net = require("node:net");
  const one = () => new Promise((r) => { const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => r(p)); }); });
  Promise.all([one(), one()]).then((p) => console.log(p.join(" ")));')
"$work/fenced" --data-dir "$work/data" --listen "127.0.0.1:$port" --raft-listen "127.0.0.1:$raft" --log-level warn &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
export FENCED_ENDPOINTS=http://127.0.0.1:$port

echo "--- the README's commands"
echo "$cmds"
echo "---"
out=$(cd "$work" && bash -euo pipefail -c "$cmds" 2>&1) || { echo "$out"; echo "ts-consumer: the README's commands failed" >&2; exit 1; }
echo "$out"
grep -q '^acquired readme/job-1 with token [1-9][0-9]*$' <<<"$out" || { echo "ts-consumer: main.js did not acquire" >&2; exit 1; }
grep -q '^held by ' <<<"$out" || { echo "ts-consumer: main.js did not see HeldError" >&2; exit 1; }

# The message example imports the optional peers (and the NATS transport):
# the versions the SDK is tested with.
peers=$(cd "$repo/sdk/typescript" && node -p '
  const d = require("./package.json").devDependencies;
  ["pg", "@types/pg", "amqplib", "@nats-io/jetstream", "@nats-io/transport-node"].map((p) => `${p}@${d[p]}`).join(" ")')
echo "--- the README's message example, with $peers"
(cd "$app" && npm install --no-audit --no-fund $peers >/dev/null && npx tsc -p tsconfig.messages.json)

echo "--- tsc $(cd "$app" && npx tsc --version), then TypeScript 5.2.2"
(cd "$app" && npm install --no-save --no-audit --no-fund typescript@5.2.2 >/dev/null && npx tsc --version && npx tsc && node main.js && npx tsc -p tsconfig.messages.json)
echo "ts-consumer: ok"
