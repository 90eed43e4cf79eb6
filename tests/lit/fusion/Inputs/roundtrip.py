"""Round-trip check of whole programs:

    roundtrip.py FUSERC... -- FILE...

For each FILE: `fuserc opt FILE` (custom form) is parsed again to the same
text, the generic form is parsed to the same custom text, and the generic
form prints back to itself. Prints `roundtrip ok: NAME` per file; exits 1
at the first difference or failure."""

from __future__ import annotations

import os
import subprocess
import sys


def opt(fuserc: list[str], text: str | None, path: str = "-", generic: bool = False) -> str:
    cmd = [*fuserc, "opt", path, *(["--print-generic"] if generic else [])]
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)}\n{proc.stderr}")
    return proc.stdout


def main(argv: list[str]) -> None:
    split = argv.index("--")
    fuserc, files = argv[:split], argv[split + 1 :]
    if not files:
        raise SystemExit("no files given")
    for path in sorted(files):
        name = os.path.basename(path)
        custom = opt(fuserc, None, path)
        generic = opt(fuserc, None, path, generic=True)
        checks = {
            "custom -> custom": opt(fuserc, custom) == custom,
            "generic -> custom": opt(fuserc, generic) == custom,
            "generic -> generic": opt(fuserc, generic, generic=True) == generic,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise SystemExit(f"FAILED: {name}: {', '.join(bad)} differ")
        print(f"roundtrip ok: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
