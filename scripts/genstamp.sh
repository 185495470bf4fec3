#!/usr/bin/env bash
# genstamp.sh write|check|verify — the stamp of the generator's inputs,
# gen/.inputs.sha256: one `sha256sum` line per input file.
#
#   write   record the inputs' hashes (make generate, after the generator)
#   check   exit 0 when the stamp matches the inputs, else list what changed
#           and exit 1; sha256sum only, so `make run` and `make build` learn
#           that gen/ is fresh without compiling the generator
#   verify  check, then prove the input list below is complete: every Go and
#           embedded file of every package of this module that cmd/generate
#           links is hashed (`go list`, no build; part of `make drift`)
#
# The stamp is a shortcut, not the check: `make drift` (go run ./cmd/generate
# -check) stays the real one.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=gen/.inputs.sha256

# Files and trees read whole.
files=(go.mod go.sum sqlc.yaml tools/go.mod tools/go.sum)
trees=(sql tmpl policy/app)
# The generator's own packages: the files directly in each directory (their
# subdirectories are other packages or test data), tests left out.
pkgs=(cmd/generate schema schema/specload policy internal/config internal/slots
  internal/cells internal/probe internal/tenancy internal/configload
  internal/kube internal/mixin)

list() {
  {
    printf '%s\0' "${files[@]}"
    find "${trees[@]}" -type f -print0
    find "${pkgs[@]}" -maxdepth 1 -type f ! -name '*_test.go' -print0
  } | LC_ALL=C sort -zu | xargs -0 sha256sum
}

check() {
  local now
  now=$(list)
  if [ ! -f "$stamp" ]; then
    echo "genstamp: $stamp is missing: run make generate" >&2
    return 1
  fi
  if [ "$now" = "$(cat "$stamp")" ]; then
    return 0
  fi
  echo "genstamp: the generator's inputs differ from $stamp (written by make generate):" >&2
  diff <(cut -c67- "$stamp") <(printf '%s\n' "$now" | cut -c67-) | sed -n 's/^< /  removed: /p; s/^> /  added: /p' >&2 || true
  join -j 2 <(awk '{print $1, $2}' "$stamp" | sort -k2) <(printf '%s\n' "$now" | awk '{print $1, $2}' | sort -k2) |
    awk '$2 != $3 {print "  changed: " $1}' >&2
  return 1
}

case "${1:-}" in
write)
  list >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
  ;;
check)
  check
  ;;
verify)
  check || { echo "genstamp: run make generate and commit $stamp" >&2; exit 1; }
  hashed=$(cut -c67- "$stamp")
  linked=$(go list -deps -f '{{with .Module}}{{if eq .Path "github.com/cellgate/cellgate"}}{{range $.GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range $.EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}' ./cmd/generate | sed "s#^$PWD/##" | grep . | LC_ALL=C sort -u)
  missing=$(LC_ALL=C comm -13 <(printf '%s\n' "$hashed" | LC_ALL=C sort -u) <(printf '%s\n' "$linked"))
  if [ -n "$missing" ]; then
    echo "genstamp: cmd/generate links files scripts/genstamp.sh does not hash; add their directories to its lists:" >&2
    printf '  %s\n' $missing >&2
    exit 1
  fi
  ;;
*)
  echo "usage: scripts/genstamp.sh write|check|verify" >&2
  exit 2
  ;;
esac
