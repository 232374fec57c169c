#!/usr/bin/env python3
"""The shape of compositor's source, from its own files: which module uses which, on how many
floors the modules stand, the circles among them, and the longest files and functions.

    tools/architecture.py [--dot] [SRC_DIR]

Two graphs are drawn from `crate::`, `super::` and child-module paths:
- areas: the top-level modules (`chart`, `definition`, `composition`, ...);
- files: every source file, where a file using its own parent's items (`super::Error`) is the
  usual Rust layout and not an arrow.
A floor is a step in the longest chain of arrows; a circle is a set of modules that reach each
other. The operator (`definition`) and the controller (`composition`) are the two roles: the
report says whether any arrow joins them other than through `api`, `rbac` and `runtime` (the
operator's bundle included, in `definition/bundle/`).
"""

import os
import re
import sys

ROLES = ("definition", "composition")
LONG_FILE = 500
LONG_FUNCTION = 80


def strip_code(text):
    """The text with comments, string and char literals blanked (newlines kept), so that braces
    and paths are only the code's own."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j])[2:])
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j]) + '"')
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def expand_use(tree):
    """`a::{b, c::{d, e}}` → [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.groups()
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    return [x for p in parts if p for x in expand_use(prefix + p)]


def resolve(module, path, modules):
    """The module a path names, from the module it is written in (longest known prefix)."""
    segments = path.split("::")
    if segments[0] == "crate":
        base, segments = (), segments[1:]
    elif segments[0] in ("super", "self"):
        base = module
        while segments and segments[0] in ("super", "self"):
            base = base[:-1] if segments[0] == "super" else base
            segments = segments[1:]
    else:
        base = module
    for end in range(len(segments), -1, -1):
        candidate = base + tuple(segments[:end])
        if candidate in modules:
            return candidate
    return None


def edges_of(module, code, modules):
    paths = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]*);", code):
        paths += expand_use(m.group(1))
    paths += re.findall(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", code)
    children = {m[-1] for m in modules if m[:-1] == module and len(m) == len(module) + 1}
    for child in children:
        if re.search(r"(?<![\w:])%s::" % child, code):
            paths.append("self::" + child)
    used = set()
    for p in paths:
        target = resolve(module, p, modules)
        if target is not None and target != module and target != ():
            used.add(target)
    return used


def functions(code, lines_of):
    """(name, first line, length in lines) of every `fn` with a body."""
    found = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        depth, k = 0, m.end()
        while k < len(code) and code[k] not in "{;":
            depth += code[k] in "(<["
            depth -= code[k] in ")>]"
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        depth, j = 0, k
        while j < len(code):
            depth += code[j] == "{"
            depth -= code[j] == "}"
            if depth == 0:
                break
            j += 1
        first, last = lines_of(m.start()), lines_of(j)
        found.append((m.group(1), first, last - first + 1))
    return found


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def floors(graph):
    """Each node's floor: 1 + the highest floor it uses, with each circle as one node."""
    comp_of = {}
    for i, comp in enumerate(sccs(graph)):
        for v in comp:
            comp_of[v] = i
    memo = {}

    def floor(c):
        if c not in memo:
            memo[c] = 0
            below = {comp_of[w] for v in graph if comp_of[v] == c for w in graph[v]} - {c}
            memo[c] = 1 + max((floor(b) for b in below), default=0)
        return memo[c]

    return {v: floor(comp_of[v]) for v in graph}


def name(module):
    return "::".join(module) or "crate"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    files = {}
    for root, _, names in os.walk(src):
        for f in names:
            if f.endswith(".rs"):
                files[module_of(src, os.path.join(root, f))] = os.path.join(root, f)
    # A file included with #[path] (e.g. `tests.rs` beside its module) is a module of its own.
    modules = set(files)
    file_graph, long_functions, lengths = {}, [], {}
    for module, path in files.items():
        text = open(path, encoding="utf-8").read()
        code = strip_code(text)
        starts = [m.start() for m in re.finditer("\n", code)]

        def lines_of(offset, starts=starts):
            import bisect
            return bisect.bisect_left(starts, offset) + 1

        lengths[module] = text.count("\n")
        used = edges_of(module, code, modules)
        # Using one's own ancestors' items is Rust's layout, not an arrow.
        file_graph[module] = {u for u in used if module[:len(u)] != u}
        for fn, line, length in functions(code, lines_of):
            long_functions.append((length, os.path.relpath(path, os.path.dirname(src)), line, fn))

    area_graph = {}
    for module, used in file_graph.items():
        area = module[:1]
        area_graph.setdefault(area, set())
        area_graph[area] |= {u[:1] for u in used if u[:1] != area}
    area_graph.pop((), None)
    for used in area_graph.values():
        used.discard(())

    if "--dot" in sys.argv:
        print("digraph areas {")
        for a, used in sorted(area_graph.items()):
            for u in sorted(used):
                print('  "%s" -> "%s";' % (name(a), name(u)))
        print("}")
        return

    area_floor = floors(area_graph)
    print("areas by floor (an area uses only areas on lower floors, unless in a circle):")
    for f in sorted(set(area_floor.values()), reverse=True):
        members = sorted(name(a) for a in area_graph if area_floor[a] == f)
        print("  %d: %s" % (f, ", ".join(members)))
    for a in sorted(area_graph):
        print("  %-12s → %s" % (name(a), ", ".join(sorted(name(u) for u in area_graph[a])) or "-"))
    file_floor = floors(file_graph)
    print("files: %d, floors: %d" % (len(file_graph), max(file_floor.values())))
    circles = [c for g in (area_graph, file_graph) for c in sccs(g) if len(c) > 1]
    print("circles: %d" % len(circles))
    for c in circles:
        print("  " + " ↔ ".join(sorted(name(m) for m in c)))
    joined = [
        (name(m), name(u))
        for m, used in file_graph.items()
        for u in used
        if m[:1] != u[:1] and {m[:1][0] if m else "", u[:1][0] if u else ""} == set(ROLES)
    ]
    print("arrows between the roles (%s): %d" % (" and ".join(ROLES), len(joined)))
    for m, u in sorted(joined):
        print("  %s → %s" % (m, u))
    long_files = sorted(((n, files[m]) for m, n in lengths.items() if n > LONG_FILE), reverse=True)
    print("files over %d lines: %d" % (LONG_FILE, len(long_files)))
    for n, path in long_files:
        print("  %5d %s" % (n, os.path.relpath(path, os.path.dirname(src))))
    long_functions.sort(reverse=True)
    over = [f for f in long_functions if f[0] > LONG_FUNCTION]
    print("functions over %d lines: %d" % (LONG_FUNCTION, len(over)))
    for length, path, line, fn in over:
        print("  %5d %s:%d %s" % (length, path, line, fn))


if __name__ == "__main__":
    main()
