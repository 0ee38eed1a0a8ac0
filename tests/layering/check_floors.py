#!/usr/bin/env python3
"""The floors check: calls between the library's files go down, never up.

`src/floors.txt` lists every file of src/, lowest first within its folder
(one line per file). The check reads the compiled objects' symbols (`nm`):
a file may use a function or variable defined by another file of its folder
only when that file is listed above it, and one defined in another folder
only when that folder is lower in the "layers, lowest first:" line of
docs/ARCHITECTURE.md (the order the include check `check_layers.sh` uses).
So a room of src/zero/ can call the rooms below it and never the rooms above
it, and a circle of calls cannot exist. Static inline functions of headers
are not symbols; the include check covers headers between folders.

A source file that is not listed fails (a new file must be placed), and so
does a listed file that does not exist.

Usage: check_floors.py SOURCE_DIR OBJECT_DIR [--plant FILE:SYMBOL]
  OBJECT_DIR  the library's object directory
              (build/CMakeFiles/zeroshard_objects.dir)
  --plant     pretend FILE (e.g. zero/plan.c) also uses SYMBOL, and succeed
              only if the check then reports exactly that call: the test
              that the check fails on a call back up.
"""
import os
import re
import subprocess
import sys


def read_floors(path):
    """[(file, line)] in order, e.g. ("zero/plan.c", 12)."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            entries.append((text.split()[0], number))
    return entries


def read_layers(doc):
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("layers, lowest first:"):
                return line.split(":", 1)[1].split()
    raise SystemExit("check_floors: %s has no 'layers, lowest first:' line" % doc)


def folder_of(rel):
    """zero/unit_ops.c -> zero; api.c -> api."""
    return rel.split("/", 1)[0] if "/" in rel else os.path.splitext(rel)[0]


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCVWG":
            defined.add(parts[2])
    return defined, used


def main():
    args = sys.argv[1:]
    plant = None
    if "--plant" in args:
        i = args.index("--plant")
        plant = args[i + 1].split(":", 1)
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__)
        return 2
    src_root, obj_root = args
    src = os.path.join(src_root, "src")
    floors_path = os.path.join(src, "floors.txt")
    layers = read_layers(os.path.join(src_root, "docs", "ARCHITECTURE.md"))
    problems = []

    floors = read_floors(floors_path)
    position = {}
    for index, (rel, line) in enumerate(floors):
        if rel in position:
            problems.append("src/floors.txt:%d: %s is listed twice" % (line, rel))
        position[rel] = (index, line)
        if not os.path.isfile(os.path.join(src, rel)):
            problems.append("src/floors.txt:%d: src/%s does not exist" % (line, rel))

    sources = []
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".c"):
                sources.append(os.path.relpath(os.path.join(dirpath, name), src))
    for rel in sorted(sources):
        if rel not in position:
            problems.append("src/%s is not in src/floors.txt: place it on its floor (a line "
                            "below every file it calls, above every file that calls it)" % rel)
        elif folder_of(rel) not in layers:
            problems.append("src/%s: its folder '%s' is not in the layers of "
                            "docs/ARCHITECTURE.md" % (rel, folder_of(rel)))

    # The objects: OBJECT_DIR/src/<rel>.o
    objects = {}
    obj_src = os.path.join(obj_root, "src")
    for dirpath, _, names in os.walk(obj_src):
        for name in names:
            if name.endswith(".c.o"):
                rel = os.path.relpath(os.path.join(dirpath, name), obj_src)[:-2]
                objects[rel] = os.path.join(dirpath, name)
    if len(objects) < 20:
        problems.append("%s holds %d objects of src/: is it the library's object directory?"
                        % (obj_root, len(objects)))
        print("\n".join(problems), file=sys.stderr)
        return 1

    defined_by, uses = {}, {}
    for rel, obj in sorted(objects.items()):
        defined, used = symbols(obj)
        for s in defined:
            defined_by[s] = rel
        uses[rel] = used
    if plant:
        if plant[0] not in uses:
            print("check_floors: --plant: no object for %s" % plant[0], file=sys.stderr)
            return 2
        uses[plant[0]] = uses[plant[0]] | {plant[1]}

    up = []
    edges = 0
    for rel, used in sorted(uses.items()):
        if rel not in position:
            continue
        for s in sorted(used):
            owner = defined_by.get(s)
            if owner is None or owner == rel or owner not in position:
                continue
            edges += 1
            mine, theirs = folder_of(rel), folder_of(owner)
            if mine == theirs:
                if position[owner][0] > position[rel][0]:
                    up.append((rel, s, owner,
                               "src/%s (floors.txt:%d) uses %s of src/%s, which stands above it "
                               "(floors.txt:%d): a call back up"
                               % (rel, position[rel][1], s, owner, position[owner][1])))
            elif mine in layers and theirs in layers and layers.index(theirs) > layers.index(mine):
                up.append((rel, s, owner,
                           "src/%s uses %s of src/%s: the layer '%s' is above '%s' "
                           "(docs/ARCHITECTURE.md)" % (rel, s, owner, theirs, mine)))

    if plant:
        found = [u for u in up if u[0] == plant[0] and u[1] == plant[1]]
        others = [u for u in up if not (u[0] == plant[0] and u[1] == plant[1])]
        if found and not others and not problems:
            print("check_floors: the planted call is reported:\n  " + found[0][3])
            return 0
        print("check_floors: the planted call %s -> %s was %s" %
              (plant[0], plant[1], "reported" if found else "NOT reported"), file=sys.stderr)
        for u in others:
            print("  also: " + u[3], file=sys.stderr)
        for p in problems:
            print("  also: " + p, file=sys.stderr)
        return 1

    for p in problems:
        print(p, file=sys.stderr)
    for u in up:
        print(u[3], file=sys.stderr)
    if problems or up:
        print("check_floors: %d problem(s); the order is src/floors.txt" % (len(problems) + len(up)),
              file=sys.stderr)
        return 1
    print("check_floors: %d files, %d calls between files, every one going down"
          % (len(objects), edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
