"""The PyTorch examples run as they are written:
- examples/fsdp2_train.py on 2 gloo ranks (torchrun) to step 6, saving every 2 steps;
  then on 1 rank, resuming from step 6 to step 8 (another world size); then on 1 rank
  rolled back to step 4 (discard_newer removes steps 6 and 8): its steps 5 and 6 give
  the losses the 2-rank run gave, and the root ends with steps 4 and 6;
- every ```python block of README.md's "PyTorch quick start", as it stands, in a fresh
  directory (the blocks use the relative root "ckpt"), in this process."""
import os
import re
import subprocess
import sys

import common

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def losses(out):
    return {int(s): float(l) for s, l in re.findall(r"^step (\d+) loss (\S+)$", out, re.M)}


def fsdp2_example(work):
    script = os.path.join(REPO, "examples", "fsdp2_train.py")
    a = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc-per-node", "2", script, "--root", "ck", "--steps", "6"], work)
    la = losses(a)
    assert sorted(la) == [1, 2, 3, 4, 5, 6], a
    b = run([sys.executable, script, "--root", "ck", "--steps", "8"], work)
    assert "resumed from step 6 on 1 rank" in b and sorted(losses(b)) == [7, 8], b
    c = run([sys.executable, script, "--root", "ck", "--steps", "6", "--rollback-to", "4"],
            work)
    assert "resumed from step 4 on 1 rank" in c, c
    lc = losses(c)
    assert sorted(lc) == [5, 6], c
    for s in (5, 6):
        assert abs(lc[s] - la[s]) <= 1e-5 * abs(la[s]), (s, la[s], lc[s])
    left = sorted(n for n in os.listdir(os.path.join(work, "ck")) if n.startswith("step-"))
    assert left == ["step-4", "step-6"], left


def readme_quick_start(work):
    text = open(os.path.join(REPO, "README.md")).read()
    section = text.split("## PyTorch quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 2, "README's PyTorch quick start lost its python blocks"
    for i, code in enumerate(blocks):
        d = os.path.join(work, f"readme-{i}")
        os.makedirs(d)
        os.chdir(d)              # in this process: torch is imported once
        exec(compile(code, f"README.md python block {i}", "exec"), {"__name__": "__main__"})
        assert os.listdir(os.path.join(d, "ckpt")), f"block {i} saved nothing"


def main():
    work = common.tmpdir("examples")
    fsdp2_example(work)
    readme_quick_start(work)


if __name__ == "__main__":
    common.main(main)
