#!/usr/bin/env bash
# Runs one test of the PyTorch layer with the project's venv python; skips (77) with
# the reason when that cannot work here.
#   run.sh VENV_PYTHON SANITIZE SCRIPT
py=$1 sanitize=$2 script=$3
if [ "$sanitize" != none ]; then
  # An ASan-built extension cannot load into the venv's unsanitized python without
  # LD_PRELOAD of libasan, under which torch's own libraries then report their leaks
  # and allocator mismatches; the C core these tests reach is covered under ASan by
  # the C suites (docs/DECISIONS.md, "Python: the python suite skips under sanitizers").
  echo "SKIP: built with -Db_sanitize=$sanitize: the extension needs an ASan python"
  exit 77
fi
if [ ! -x "$py" ]; then
  echo "SKIP: no project venv at $py (scripts/install-deps creates it)"
  exit 77
fi
if ! "$py" -c 'import torch, safetensors' 2>/dev/null; then
  echo "SKIP: torch or safetensors missing from $py (scripts/install-deps installs them)"
  exit 77
fi
exec "$py" "$script"
