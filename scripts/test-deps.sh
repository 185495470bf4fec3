#!/usr/bin/env bash
# test-deps.sh — make sure the programs `make test` drives are installed:
# Chromium (the console's browser tests), podman and runc (the container
# test), kubectl and promtool (the deploy checks), redis-server (the slot
# oracle). Missing ones are installed with apt-get on a Debian-family
# machine when this runs as root or with sudo; anywhere else it stops at
# once with one line naming the missing programs and how to get them.
set -euo pipefail

# program → Debian package; kubectl is the kubectl package where a
# repository has it, else Debian's kubernetes-client; Debian's prometheus
# package brings promtool.
missing=() pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
need() { # need PACKAGE PROGRAM...
  local pkg=$1 p
  shift
  for p in "$@"; do have "$p" && return 0; done
  missing+=("$1") pkgs+=("$pkg")
}
need chromium chromium chromium-browser google-chrome
need podman podman
need runc runc
need kubectl kubectl
need prometheus promtool
need redis-server redis-server

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  if have sudo && sudo -n true 2>/dev/null; then sudo=(sudo -n); else sudo=(none); fi
fi
if ! have apt-get || [ "${sudo[0]:-}" = none ]; then
  why="this machine has no apt-get"
  have apt-get && why="installing needs root or password-less sudo"
  echo "make test needs ${missing[*]}, not found on PATH ($why): install the packages ${pkgs[*]} (Debian names; on macOS: brew install chromium podman kubectl prometheus redis), then run make test again" >&2
  exit 1
fi

echo "test-deps: installing ${pkgs[*]} for ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
for pkg in "${pkgs[@]}"; do
  case $pkg in
  kubectl)
    "${sudo[@]}" apt-get install -y -qq kubectl || "${sudo[@]}" apt-get install -y -qq kubernetes-client
    ;;
  prometheus)
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus
    ;;
  *)
    "${sudo[@]}" apt-get install -y -qq "$pkg"
    ;;
  esac
done
for p in "${missing[@]}"; do
  have "$p" || { echo "test-deps: $p is still missing after apt-get install" >&2; exit 1; }
done
