"""Starts the Vibe kernel headless.

    blender -b --factory-startup --python run_kernel.py -- --stdio
    python run_kernel.py --stdio            (a Python with the bpy module)
    python run_kernel.py --tcp 127.0.0.1:9833 --token-file token.txt
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Before anything else: a jailed kernel adds its last seccomp layer (no execve) here.
from vibe_kernel import confine  # noqa: E402

confine.STATE = confine.establish()

from vibe_kernel.headless import main  # noqa: E402

argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
main(argv)
