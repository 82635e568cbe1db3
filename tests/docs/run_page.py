"""Run one page's blocks in page order in this (fresh) process: Python blocks in one namespace,
bash blocks through ``bash -e`` in the same folder, file blocks written for later ones.

Usage: python -m tests.docs.run_page BLOCKS.json (a list of {"lang", "code", "file"}).
"""

import json
import subprocess
import sys
from pathlib import Path


def main(path: str) -> None:
    namespace = {"__name__": "__main__"}
    for index, block in enumerate(json.loads(Path(path).read_text())):
        print(f"--- block {index} ({block['lang']})", flush=True)
        if block["file"]:
            Path(block["file"]).write_text(block["code"])
        elif block["lang"] == "python":
            exec(compile(block["code"], f"<block {index}>", "exec"), namespace)
        elif block["lang"] == "bash":
            subprocess.run(["bash", "-e", "-c", block["code"]], check=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
