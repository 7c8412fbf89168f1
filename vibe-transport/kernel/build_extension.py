"""Builds the installable zip of the Vibe kernel add-on, with the standard library only.

    python3 vibe-transport/kernel/build_extension.py dist/

writes `dist/vibe_kernel-<version>.zip` and prints its path. The zip holds one folder,
`vibe_kernel/`, with the kernel's files (no tests, no caches, no hidden files): Blender 4.2 and
later install it as an extension (Edit > Preferences > Get Extensions > Install from Disk, or
`blender --command extension install-file -r user_default vibe_kernel-<version>.zip`; its
`blender_manifest.toml` names the permissions), Blender 3.4 to 4.1 as a legacy add-on (Edit >
Preferences > Add-ons > Install; `bl_info`). The build is deterministic: entries sorted, fixed
timestamps and modes, so the same source gives the same bytes.
"""

import io
import os
import re
import sys
import zipfile

PACKAGE = "vibe_kernel"
# 1980-01-01, the earliest time a zip can hold: no build time leaks into the bytes.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
SKIPPED_DIRS = {"__pycache__", "tests"}
SKIPPED_SUFFIXES = (".pyc", ".pyo", "~", ".swp", ".orig", ".rej")


def package_dir():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), PACKAGE)


def manifest_version(source):
    """The `version` of `blender_manifest.toml` (a plain string line; no TOML parser needed)."""
    with open(os.path.join(source, "blender_manifest.toml"), encoding="utf-8") as f:
        match = re.search(r'^version\s*=\s*"([^"]+)"\s*$', f.read(), re.MULTILINE)
    if match is None:
        raise SystemExit("build_extension: blender_manifest.toml has no version line")
    return match.group(1)


def bl_info_version(source):
    """bl_info's version in `__init__.py`, as "x.y.z" (read as text: nothing is imported)."""
    with open(os.path.join(source, "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'"version":\s*\((\d+),\s*(\d+),\s*(\d+)\)', f.read())
    if match is None:
        raise SystemExit("build_extension: __init__.py has no bl_info version")
    return ".".join(match.groups())


def package_files(source):
    """The files that ship, as sorted paths relative to `source` with "/" separators."""
    found = []
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(SKIPPED_SUFFIXES):
                continue
            found.append(os.path.relpath(os.path.join(root, name), source).replace(os.sep, "/"))
    return sorted(found)


def zip_bytes(source):
    """The zip's bytes: every entry under `vibe_kernel/`, sorted, fixed time, mode 0644."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for relative in package_files(source):
            info = zipfile.ZipInfo("%s/%s" % (PACKAGE, relative), date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, whatever builds it
            info.external_attr = (0o100644 & 0xFFFF) << 16
            with open(os.path.join(source, relative), "rb") as f:
                archive.writestr(info, f.read(), compresslevel=9)
    return buffer.getvalue()


def build(out_dir, source=None):
    """Writes the zip into `out_dir` (created if needed) and returns its path."""
    source = source or package_dir()
    version = manifest_version(source)
    if version != bl_info_version(source):
        raise SystemExit("build_extension: blender_manifest.toml's version %s differs from bl_info's %s"
                         % (version, bl_info_version(source)))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "%s-%s.zip" % (PACKAGE, version))
    data = zip_bytes(source)
    staging = path + ".part"
    with open(staging, "wb") as f:
        f.write(data)
    os.replace(staging, path)
    return path


def main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python3 build_extension.py OUT_DIR", file=sys.stderr)
        return 2
    print(build(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
