"""file.import's reference check, before the importer runs: a model file may name other files
(glTF buffers and images, an OBJ's material libraries and their texture maps, USD sublayers,
references, payloads and asset paths), and the importer reads them. Every file a model names must
resolve inside the session's sandbox, by the same rules as the path of the call (files.py): after
resolving every link, not into HUMAN_ONLY, not into a project root. Anything else is refused with
contract_violation, reason `sandbox`, and the importer never runs.

What a reference is, as an attacker would write it: an absolute path, `..`, a `file:` (or any
scheme's) URI, percent-encoded (`%2e%2e/`), with backslashes, through a linked folder. Each
reference is checked in every form an importer might read it (as written, percent-decoded, with
backslashes as separators), and each form both as the operating system resolves it (links first)
and as a lexical normalisation does (`a/../b` is `b`); every one must lie inside.

This check reads text: it is a filter, not the boundary. Binary USD (.usdc, .usdz, a .usd with
the PXR-USDC magic) cannot be read with the standard library, so it is refused unless the kernel
runs in the jail (confine.STATE: the file-system confinement), where the operating system hides
every path outside the sandbox. FBX is not scanned here; the check after the import (exchange.py)
refuses any image it named outside the sandbox."""

import json
import os
import re
import struct
from urllib.parse import unquote

from . import confine, files
from .envelope import Refusal, invalid
from .state import inside

# How many files one import may lead the check through (an OBJ and its MTLs, a USD layer stack).
MAX_FILES = 64
# Bytes of glTF JSON the check parses (embedded data: URIs make it large); a bigger document is
# refused rather than read in part. OBJ, MTL and USD text are read line by line, of any size.
MAX_JSON_BYTES = 256 * 1024 * 1024
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
USD_ASSET = re.compile(r"@@@(.*?)@@@|@([^@\n]*)@")
MTL_MAP_KEYS = ("bump", "disp", "decal", "norm", "refl")


def refusal(relative, reference, why):
    return Refusal("contract_violation", "path %r names %r, which %s" % (relative, reference, why),
                   reason="sandbox", field="path", reference=reference)


def confined():
    """Whether the operating system confines this kernel's file system to the sandbox (the jail)."""
    return confine.STATE.get("filesystem") is True


def forms(reference, decode):
    """The ways an importer might read `reference`."""
    found = {reference, reference.replace('"', "")}  # the OBJ importer drops quotes
    if decode:
        found.add(unquote(reference))
    for form in list(found):
        found.add(form.replace("\\", "/"))
    return found


def check_reference(k, relative, folder, reference, decode=False):
    """Refuses `reference` (named by the model `relative`, resolved against the real folder
    `folder`) unless every form of it resolves inside the sandbox; returns the resolved path."""
    root = os.path.realpath(k.state.sandbox)
    if "\x00" in reference:
        raise refusal(relative, reference, "holds a NUL byte")
    resolved = None
    for form in sorted(forms(reference, decode)):
        if SCHEME.match(form) and not form.startswith("data:"):
            raise refusal(relative, reference, "is a URI or drive path; only relative paths inside the sandbox are read")
        joined = os.path.join(folder, form)
        for candidate in (os.path.realpath(joined), os.path.realpath(os.path.normpath(joined))):
            if any(inside(project, candidate) for project in k.state.project_roots):
                raise refusal(relative, reference, "resolves into a project root")
            if candidate == root or not inside(root, candidate):
                raise refusal(relative, reference, "resolves outside the sandbox")
            if any(files.is_human_only(p) for p in os.path.relpath(candidate, root).split(os.sep)):
                raise refusal(relative, reference, "resolves into HUMAN_ONLY, which is for people only")
        if form == reference:
            resolved = os.path.realpath(joined)
    return resolved


def read_json_text(relative, path):
    if os.path.getsize(path) > MAX_JSON_BYTES:
        raise refusal(relative, os.path.basename(path), "is larger than the %d bytes the reference check reads"
                      % MAX_JSON_BYTES)
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def lines(path):
    """The lines of a text file, read as it goes (undecodable bytes replaced)."""
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        yield from f


# ---------------------------------------------------------------- glTF

def uris(value):
    """Every string under a "uri" key anywhere in a glTF document (buffers, images, extensions)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "uri" and isinstance(item, str):
                yield item
            else:
                yield from uris(item)
    elif isinstance(value, list):
        for item in value:
            yield from uris(item)


def glb_json(relative, path):
    """The JSON chunk of a binary glTF (header: magic, version, length; then length-prefixed chunks)."""
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) < 20 or head[:4] != b"glTF":
            raise invalid("path", "%r is not a binary glTF (no glTF header)" % relative)
        length, kind = struct.unpack("<I4s", head[12:20])
        if kind != b"JSON":
            raise invalid("path", "%r does not start with a JSON chunk" % relative)
        if length > MAX_JSON_BYTES:
            raise refusal(relative, relative, "has a JSON chunk larger than the %d bytes the reference check reads"
                          % MAX_JSON_BYTES)
        return f.read(length).decode("utf-8", errors="replace")


def check_gltf(k, relative, path, binary):
    text = glb_json(relative, path) if binary else read_json_text(relative, path)
    try:
        document = json.loads(text)
    except ValueError as e:
        raise invalid("path", "%r is not a glTF JSON document: %s" % (relative, e))
    folder = os.path.dirname(path)
    for uri in uris(document):
        if not uri.startswith("data:"):
            check_reference(k, relative, folder, uri, decode=True)


# ---------------------------------------------------------------- OBJ and MTL

def tails(words):
    """Every run of words up to the line's end: the path after any options, spaces kept."""
    return [" ".join(words[i:]) for i in range(len(words))]


def check_obj(k, relative, path):
    folder = os.path.dirname(path)
    libraries = []
    for line in lines(path):
        words = line.split()
        if len(words) > 1 and words[0] == "mtllib":
            for name in set(tails(words[1:]) + words[1:]):
                libraries.append(check_texture(k, relative, folder, name))
    default = os.path.splitext(path)[0] + ".mtl"  # read by some importers without an mtllib
    if os.path.isfile(default):
        libraries.append(check_reference(k, relative, folder, os.path.basename(default)))
    seen = set()
    for library in libraries:
        if library in seen or not os.path.isfile(library):
            continue
        seen.add(library)
        if len(seen) > MAX_FILES:
            raise refusal(relative, os.path.basename(library), "is past the %d files the check follows" % MAX_FILES)
        for line in lines(library):
            words = line.split()
            if len(words) > 1 and (words[0].lower().startswith("map_") or words[0].lower() in MTL_MAP_KEYS):
                for name in tails(words[1:]):
                    check_texture(k, relative, os.path.dirname(library), name)


def check_texture(k, relative, folder, name):
    """A file an OBJ or MTL names: Blender's OBJ importer tries a texture's name as given first (a
    relative name then means the kernel's working folder), then beside the MTL. Beside the file
    naming it, it must be inside; in the working folder it must be inside wherever a file by that
    name exists there (checked for material libraries too). Returns the path beside."""
    resolved = check_reference(k, relative, folder, name)
    for form in forms(name, False):
        if os.path.exists(form):
            check_reference(k, relative, os.getcwd(), form)
    return resolved


# ---------------------------------------------------------------- USD

def usd_is_binary(path):
    with open(path, "rb") as f:
        head = f.read(8)
    return head == b"PXR-USDC" or head[:2] == b"PK"  # crate, or a .usdz (a zip)


def check_usd(k, relative, path):
    pending = [path]
    seen = set()
    while pending:
        layer = pending.pop()
        if layer in seen:
            continue
        seen.add(layer)
        if len(seen) > MAX_FILES:
            raise refusal(relative, os.path.basename(layer), "is past the %d files the check follows" % MAX_FILES)
        if usd_is_binary(layer) or layer.lower().endswith((".usdc", ".usdz")):
            if confined():
                continue
            raise refusal(relative, os.path.relpath(layer, os.path.realpath(k.state.sandbox)),
                          "is binary USD, whose references this kernel cannot read; it is imported only on a "
                          "kernel in the jail (or write it as .usda)")
        for line in lines(layer):
            for match in USD_ASSET.finditer(line):
                reference = match.group(1) if match.group(1) is not None else match.group(2)
                if not reference:
                    continue
                target = check_reference(k, relative, os.path.dirname(layer), reference)
                if os.path.isfile(target) and target.lower().endswith((".usd", ".usda", ".usdc", ".usdz")):
                    pending.append(target)


def check(k, relative, path, fmt):
    """Refuses the import of the model at `path` (its real path, already inside the sandbox) if a
    file it names lies outside the sandbox."""
    if fmt == "gltf":
        check_gltf(k, relative, path, binary=False)
    elif fmt == "glb":
        check_gltf(k, relative, path, binary=True)
    elif fmt == "obj":
        check_obj(k, relative, path)
    elif fmt == "usd":
        check_usd(k, relative, path)
