"""Starts the Vibe kernel headless.

    blender -b --factory-startup --python run_kernel.py -- --stdio
    python run_kernel.py --stdio            (a Python with the bpy module)
    python run_kernel.py --tcp 127.0.0.1:9833 --token-file token.txt
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vibe_kernel.wire import main  # noqa: E402

argv = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
main(argv)
