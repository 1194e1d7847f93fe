#!/usr/bin/env bash
# Runs one test of the PyTorch layer with the project's venv python; skips (77) with
# the reason when that cannot work here.
#   run.sh VENV_PYTHON SANITIZE SCRIPT
py=$1 sanitize=$2 script=$3
if [ ! -x "$py" ]; then
  echo "SKIP: no project venv at $py (scripts/install-deps creates it)"
  exit 77
fi
if ! "$py" -c 'import torch, safetensors' 2>/dev/null; then
  echo "SKIP: torch or safetensors missing from $py (scripts/install-deps installs them)"
  exit 77
fi
if [ "$sanitize" != none ]; then
  # The extension is sanitized, the venv's python is not: the sanitizer runtimes go in
  # first with LD_PRELOAD (the ranks inherit it). Leak checking is off: CPython and
  # torch keep their allocations to exit; our leaks are the C suites' to find
  # (docs/decisions/0039-python-suite-under-sanitizers.md).
  preload=""
  case $sanitize in *address*) preload="$(gcc -print-file-name=libasan.so)";; esac
  case $sanitize in *undefined*) preload="$preload:$(gcc -print-file-name=libubsan.so)";; esac
  for lib in ${preload//:/ }; do
    if [ ! -e "$lib" ]; then
      echo "SKIP: built with -Db_sanitize=$sanitize but the runtime $lib is missing"
      exit 77
    fi
  done
  export LD_PRELOAD="${preload#:}${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec "$py" "$script"
