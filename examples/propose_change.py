"""Write a proposed change of examples/catalog into a folder, as a hoster's pull request would.

Used by `make demo` to show `gpuclass plan`: the whole-GPU class gets `maxCount: 1`, the
reserved class a new model (an identity field: refused), and the BYOL vGPU class is removed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CATALOG = Path(__file__).resolve().parent / "catalog"


def main(target: str) -> None:
    out = Path(target)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(CATALOG, out)
    whole = out / "example-whole-gpu.yaml"
    whole.write_text(
        whole.read_text().replace("  mode: passthrough\n", "  mode: passthrough\n  maxCount: 1\n")
    )
    reserved = out / "example-reserved-gpu.yaml"
    reserved.write_text(
        reserved.read_text().replace("model: example-model", "model: example-model-2")
    )
    (out / "example-byol-vgpu.yaml").unlink()


if __name__ == "__main__":
    main(sys.argv[1])
