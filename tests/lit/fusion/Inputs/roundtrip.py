"""Round-trip check of whole programs through `fuserc opt`:

    roundtrip.py FILE...

For each FILE: `fuserc opt FILE` (custom form) is parsed again to the same
text, the generic form is parsed to the same custom text, and the generic
form prints back to itself. Prints `roundtrip ok: NAME` per file; exits 1
at the first difference or failure. The command runs in this process
(click's runner), so many files cost one interpreter start."""

from __future__ import annotations

import os
import sys

from click.testing import CliRunner

from fuserc.cli import main as fuserc


def opt(text: str | None, path: str = "-", generic: bool = False) -> str:
    args = ["opt", path, *(["--print-generic"] if generic else [])]
    result = CliRunner().invoke(fuserc, args, input=text)
    if result.exit_code != 0:
        raise SystemExit(f"FAILED: fuserc {' '.join(args)}\n{result.output}")
    return result.stdout


def main(files: list[str]) -> None:
    if not files:
        raise SystemExit("no files given")
    for path in sorted(files):
        name = os.path.basename(path)
        custom = opt(None, path)
        generic = opt(None, path, generic=True)
        checks = {
            "custom -> custom": opt(custom) == custom,
            "generic -> custom": opt(generic) == custom,
            "generic -> generic": opt(generic, generic=True) == generic,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise SystemExit(f"FAILED: {name}: {', '.join(bad)} differ")
        print(f"roundtrip ok: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
