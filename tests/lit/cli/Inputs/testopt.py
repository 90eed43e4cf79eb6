"""`fuserc` with the passes of test_passes.py registered, and one pass whose
module does not exist (`test-missing`), as a pass not written yet."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuserc import pipeline  # noqa: E402
from fuserc.cli import main  # noqa: E402

pipeline.PASSES.update(
    {
        "test-tag": pipeline.PassEntry("test_passes", "TestTag", "tags the module", {"label": "the tag"}),
        "test-break": pipeline.PassEntry("test_passes", "TestBreak"),
        "test-error": pipeline.PassEntry("test_passes", "TestError"),
        "test-xdsl-failure": pipeline.PassEntry("test_passes", "TestXdslFailure"),
        "test-missing": pipeline.PassEntry("fuserc.passes.test_missing_pass", "TestMissing"),
    }
)

if __name__ == "__main__":
    main()
