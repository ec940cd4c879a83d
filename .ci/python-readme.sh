#!/usr/bin/env bash
# Follows sdk/python/README.md as a new user would: copies the repository's
# files into a fresh temporary directory and runs, as written and in order,
# every line of the README's ```sh blocks (Install, then Tests) from the
# root of that copy, in one shell. Any command that fails fails the script;
# a README without the blocks fails too. As root without sudo (CI), `sudo`
# runs the command itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readme="$root/sdk/python/README.md"

commands=$(awk '/^```sh$/ {on=1; next} /^```$/ {on=0} on' "$readme")
if [ -z "$commands" ] || ! grep -q 'pip install' <<<"$commands" || ! grep -q 'pytest' <<<"$commands"; then
  echo "python-readme: no install and test commands found in $readme" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/fenced"
# The files of the repository (as a clone has them), nothing built or cached.
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --) | tar -xf - -C "$tmp/fenced"

script="$tmp/readme-commands.sh"
{
  echo 'set -euxo pipefail'
  if [ "$(id -u)" = 0 ] && ! command -v sudo >/dev/null; then
    echo 'sudo() { "$@"; }'
  fi
  echo "$commands"
} >"$script"
echo "python-readme: running in $tmp/fenced:"
sed 's/^/    /' <<<"$commands"
(cd "$tmp/fenced" && env -u PYTHONPATH -u VIRTUAL_ENV bash "$script")
echo "python-readme: the README's commands passed in a fresh copy"
