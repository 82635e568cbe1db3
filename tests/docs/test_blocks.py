"""Every code block of every page runs: each page in a fresh process, its blocks in page order
(so a page cannot lean on another's state), long runs on the small setting their marker names."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import PAGES, blocks, page_id
from tests.paths import ROOT

RUNNABLE = ("python", "bash")
# what a page's output must hold, beyond its blocks running: (page, regular expression)
EXPECTED = {
    "README.md": [
        r"^0 32768\.0 True 0$",
        r"skipped",
        r"^dynamic: 30 settings x 1 trace\(s\) \(grads\)",
        r"^DynamicLossScalingUpdater\(solver, loss, feed, policy=DynamicScale\(",
        r"\A(?![\s\S]*record a longer run)",  # the trace is long enough for dls tune
    ],
    "docs/guide/updater.md": [r"^0 32768\.0 True 0$", r"init_scale"],
    "docs/guide/checkpoints.md": [
        r"checkpoint cut\.ckpt\.npz: truncated or not an \.npz archive",
    ],
    "docs/guide/mixed-precision.md": [
        r"\| Affine \| half \| \d+ \|",
        r"\| SoftmaxCrossEntropy \| float \|",
    ],
    "docs/guide/pytorch.md": [
        r"^AttributeError .*GradScaler\.unscale_\): here it is unscale\(\)",
        r"^TypeError .*policy=DynamicScale\(init_scale=65536\.0\)",
        r"^TypeError update\(\) takes no new_scale",
        r"^TypeError .*\(did you mean 'growth_interval'\?\)",
        r"^True$",
    ],
    "docs/guide/stages.md": [r"^20 0$", r"D updater: skipped steps"],
    "docs/guide/recording.md": [r"\| `\(whole model\)` \|", r"\| `fc1/affine/W` \|"],
    # each rank's own line, in either order (the page writes each line in one write)
    "docs/guide/workers.md": [r"^0 resumed at step 100$", r"^1 resumed at step 100$"],
    "docs/simulator/cli.md": [r"refused \(status 2\): mine/README.md kept"],
}
SKIPPED = {  # the blocks that cannot run here, and why: a new one must be added on purpose
    "docs/guide/workers.md": 2,
    "docs/install.md": 3,
    "docs/development.md": 2,
    "README.md": 2,
}
WITH_CODE = [p for p in PAGES if any(b.lang in RUNNABLE and not b.skip for b in blocks(p))]
PARAMS = [
    pytest.param(p, marks=[pytest.mark.mpi] * any("mpiexec" in b.code for b in blocks(p)))
    for p in WITH_CODE
]


def test_every_block_is_python_bash_or_text_and_every_skip_is_known():
    for page in PAGES:
        for block in blocks(page):
            assert block.lang in (*RUNNABLE, "text", ""), (page_id(page), block.lang)
            assert block.skip is None or block.skip.strip(), (page_id(page), "skip without why")
    skipped = {page_id(p): sum(b.skip is not None for b in blocks(p)) for p in PAGES}
    assert {k: v for k, v in skipped.items() if v} == SKIPPED


@pytest.mark.nnabla
@pytest.mark.parametrize("page", PARAMS, ids=page_id)
def test_the_pages_blocks_run_in_order_in_a_fresh_process(tmp_path, page):
    code = [
        {"lang": b.lang, "code": b.runnable_code(), "file": b.file}
        for b in blocks(page)
        if b.lang in RUNNABLE and not b.skip
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(code))
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the pages run examples/ as a checkout
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.docs.run_page", str(tmp_path / "blocks.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for pattern in EXPECTED.get(page_id(page), []):
        assert re.search(pattern, proc.stdout, re.M), (pattern, proc.stdout[-3000:])


def test_every_expectation_names_a_page_with_code():
    assert set(EXPECTED) <= {page_id(p) for p in WITH_CODE}
