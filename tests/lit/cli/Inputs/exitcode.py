"""Run a command, pass its output through, then print `exit code: N`, so a
lit test can check an exact exit status (lit's `not` only knows non-zero)."""

import subprocess
import sys

if __name__ == "__main__":
    proc = subprocess.run(sys.argv[1:])
    sys.stdout.flush()
    print(f"exit code: {proc.returncode}", flush=True)
