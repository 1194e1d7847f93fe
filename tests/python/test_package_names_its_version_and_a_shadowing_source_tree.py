"""libshard.__version__ is the project's version (meson.build's project()); and
importing libshard with the source tree's python/ first on sys.path, where the
compiled extension is not, fails with a message that says what happened (the source
tree shadows the built package) and what to do, not with a bare ImportError of _ck."""
import os
import re
import subprocess
import sys

import common

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    import libshard
    with open(os.path.join(SRC, "meson.build")) as f:
        want = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
    assert libshard.__version__ == want, (libshard.__version__, want)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", "import libshard"], cwd=os.path.join(SRC, "python"),
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, "the source tree imported: the test sees no shadowing"
    err = p.stderr.strip().splitlines()[-1]
    for said in ("source tree", "shadows the built package", "PYTHONPATH=build/python",
                 "pip install ."):
        assert said in err, f"the message lacks '{said}': {err}"
    print(err)


if __name__ == "__main__":
    common.main(main)
