#!/usr/bin/env python3
"""Checks the include boundaries between ptc's folders (a CTest test, `include_boundaries`).

A module is a folder directly under lib/ (lib/graph, lib/passes, ...). Its headers are private to
it. Code in lib/ and tools/ may include:
  - the public headers, include/ptc/*.h;
  - its own module's headers (any file under the same lib/<module>/ folder, or its own tool folder);
  - the runtime's headers, lib/runtime/** (the helper code that is embedded into generated
    libraries and shared with ptc by design: dtype conversions, limits, the precision modes).
Tests (test/) and fuzz targets (fuzz/) are white-box and may include any header.

Prints one line per violation and exits 1 when there is any.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".cpp", ".h", ".cu", ".cuh", ".hpp")


def owner(path):
    """The folder that owns a file: lib/<module>, or tools/<tool>, or None."""
    rel = os.path.relpath(path, ROOT).split(os.sep)
    if rel[0] in ("lib", "tools") and len(rel) > 2:
        return "/".join(rel[:2])
    return None


def resolve(including, name):
    for base in (os.path.dirname(including), os.path.join(ROOT, "lib"), os.path.join(ROOT, "include")):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def main():
    problems = []
    for top in ("lib", "tools"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                src = os.path.join(d, f)
                me = owner(src)
                with open(src, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for name in INCLUDE_RE.findall(text):
                    target = resolve(src, name)
                    if target is None:
                        continue  # a generated or system header
                    rel = os.path.relpath(target, ROOT)
                    if rel.startswith("include" + os.sep) or rel.startswith(os.path.join("lib", "runtime") + os.sep):
                        continue
                    them = owner(target)
                    if them is not None and them != me:
                        problems.append(f"{os.path.relpath(src, ROOT)}: includes {rel}, a private header of {them}")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a folder boundary: move the shared code to a public header "
              "(include/ptc/) or into the module that uses it", file=sys.stderr)
        return 1
    print("include boundaries: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
