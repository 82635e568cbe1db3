"""Resume every path's run of one family in this new process and write the runs to a file:
``python -m tests.updater.families.resume FAMILY FOLDER OUT`` (``runs.resumed_runs`` calls it)."""

import pickle
import sys
from pathlib import Path


def main(argv) -> int:
    from .runs import PATHS, resume

    name, folder, out = argv
    runs = {path: resume(name, path, Path(folder)) for path in PATHS}
    with open(out, "wb") as f:
        pickle.dump(runs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
