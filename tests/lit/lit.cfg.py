# lit configuration for fuserc's IR tests: `fuserc opt` piped to `filecheck`.
import os
import shutil
import sys

import lit.formats

config.name = "fuserc"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Inputs", "lit.cfg.py"]
config.environment["PYTHONUNBUFFERED"] = "1"
for var in ("PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

fuserc = shutil.which("fuserc") or f"{sys.executable} -m fuserc"
config.substitutions.append(("%fuserc", fuserc))
config.substitutions.append(("%examples", os.path.join(os.path.dirname(__file__), "..", "..", "examples")))
_beside = os.path.join(os.path.dirname(shutil.which("fuserc") or ""), "python3")
config.substitutions.append(("%python", _beside if os.path.exists(_beside) else sys.executable))  # fuserc's python
