#!/usr/bin/env python3
"""layers.py MAP: the layers of docs/architecture.md, checked against the code.

The section "## Layers inside a part" of MAP has one table row a part:
    | `ram/*.c` | `kvm-exit.c` `uffd.c` ... `wait.c` |
the files matching the glob, listed top to bottom.  Checked:
  - every file the glob matches is listed once, and every listed file
    exists (a new file is placed, not forgotten);
  - no file calls (or names) a function defined, not static, in a file
    listed above it: calls run downwards only, so no two files of a part
    call each other and the part has no circle.
Comments and string literals are left out of the reading.  Prints what
is wrong, one line each, and exits 1; or one line and 0.
"""
import glob
import os
import re
import sys

SECTION = "## Layers inside a part"
DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b([a-z_]\w*)\s*\([^;]*$", re.M)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def code_of(path):
    """The file's text without comments and literals (newlines kept)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return NOISE.sub(lambda m: "\n" * m.group(0).count("\n") or " ", text)


def parts(map_path):
    """(glob, [file, ...] top to bottom) for each row of the section."""
    rows, on = [], False
    with open(map_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                on = line.strip() == SECTION
                continue
            cells = line.split("|")
            if not on or len(cells) < 4 or "`" not in cells[1]:
                continue
            names = re.findall(r"`([^`]+)`", cells[2])
            rows.append((cells[1].strip().strip("`"), names))
    return rows


def check_part(pattern, names):
    """The complaints about one part: membership, then upward calls."""
    folder = os.path.dirname(pattern)
    files = [os.path.join(folder, n) for n in names]
    wrong = [f"{pattern}: {f} is listed but does not exist" for f in files
             if not os.path.isfile(f)]
    wrong += [f"{pattern}: {f} is listed twice" for f in set(files) if files.count(f) > 1]
    wrong += [f"{pattern}: {f} has no place in the list" for f in sorted(glob.glob(pattern))
              if f not in files]
    if wrong:
        return wrong
    code = {f: code_of(f) for f in files}
    defined = {f: set(DEFINITION.findall(code[f])) for f in files}
    for low, f in enumerate(files):
        used = set(IDENT.findall(code[f])) - defined[f]
        for above in files[:low]:
            up = sorted(used & defined[above])
            if up:
                wrong.append(f"{f} calls up into {above}: {', '.join(up)}")
    return wrong


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = parts(sys.argv[1])
    if not rows:
        print(f"FAIL: no table under '{SECTION}' in {sys.argv[1]}")
        return 1
    wrong = [w for pattern, names in rows for w in check_part(pattern, names)]
    for w in wrong:
        print("  " + w)
    if wrong:
        print(f"FAIL: {len(wrong)} breaches of the layers in {sys.argv[1]}")
        return 1
    print(f"{len(rows)} parts in layers, {sum(len(n) for _, n in rows)} files, calls run downwards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
