"""Static checks of the paper's LaTeX for machines without TeX: balanced braces and environments, no text-mode _,
every \\ref and \\eqref has a \\label, no label twice, every \\cite key is in references.bib, every generated
number macro the text uses is defined (tables/numbers.tex, tables/numbers2.tex or main.tex), every \\input file exists.

    python paper/check_tex.py          # exit status 1 and one line per problem, or "ok"

It reads main.tex and the files it \\input s (sections/, tables/); it is not a TeX parser, so it checks what
slips through edits most often, not everything pdflatex would refuse.
"""
from __future__ import annotations

import re
from pathlib import Path

PAPER = Path(__file__).resolve().parent
# camelCase control sequences that come from LaTeX or its packages, not from the generated macros
BUILTIN_CAMEL = {"IfFileExists", "FloatBarrier", "LaTeX", "TeX", "newcommand", "arraybackslash"}


def strip_comments(text: str) -> str:
    """The text without TeX comments (an unescaped % to the end of its line)."""
    return "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in text.splitlines())


def sources(main: Path) -> dict[Path, str]:
    """main.tex and every file it \\input s (recursively), comments removed."""
    out, todo = {}, [main]
    while todo:
        p = todo.pop()
        if p in out or not p.exists():
            continue
        out[p] = strip_comments(p.read_text())
        for name in re.findall(r"\\input\{([^}]+)\}", out[p]):
            q = PAPER / name
            todo.append(q if q.suffix == ".tex" else q.with_suffix(".tex"))
    return out


def brace_problems(name: str, text: str) -> list[str]:
    depth, probs = 0, []
    for i, ch in enumerate(text):
        if ch in "{}" and i and text[i - 1] == "\\" and not (i > 1 and text[i - 2] == "\\"):
            continue        # \{ and \} are characters, \\} closes a group after a line break
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            probs.append(f"{name}: unmatched }} at line {text.count(chr(10), 0, i) + 1}")
            depth = 0
    if depth:
        probs.append(f"{name}: {depth} unclosed {{")
    return probs


def env_problems(name: str, text: str) -> list[str]:
    stack, probs = [], []
    for m in re.finditer(r"\\(begin|end)\{([^}]+)\}", text):
        line = text.count("\n", 0, m.start()) + 1
        if m.group(1) == "begin":
            stack.append((m.group(2), line))
        elif not stack or stack[-1][0] != m.group(2):
            probs.append(f"{name}: \\end{{{m.group(2)}}} at line {line} does not close "
                         f"{stack[-1] if stack else 'anything'}")
        else:
            stack.pop()
    probs += [f"{name}: \\begin{{{e}}} at line {line} never closed" for e, line in stack]
    return probs


def underscore_problems(name: str, text: str) -> list[str]:
    """Unescaped _ outside math and outside the arguments that take file names or keys (a text-mode _ stops
    pdflatex, also inside \\texttt)."""
    t = re.sub(r"\\(?:label|ref|eqref|cite[tp]?|input|includegraphics|graphicspath|bibliography|bibliographystyle|"
               r"newcommand|IfFileExists)(?:\[[^]]*\])?\{[^}]*\}", "", text)
    t = re.sub(r"\\newcommand\{\\[A-Za-z]+\}", "", t)
    t = re.sub(r"\\\[.*?\\\]", "", t, flags=re.S)
    t = re.sub(r"(?<!\\)\$.*?(?<!\\)\$", "", t, flags=re.S)
    return [f"{name}: unescaped _ in text at line {t.count(chr(10), 0, m.start()) + 1}: "
            f"{t[max(0, m.start() - 30):m.start() + 10].strip()!r}" for m in re.finditer(r"(?<!\\)_", t)]


def check(main: Path = PAPER / "main.tex") -> list[str]:
    src = sources(main)
    probs = []
    for p, text in src.items():
        rel = p.relative_to(PAPER)
        probs += brace_problems(str(rel), text)
        probs += env_problems(str(rel), text)
        probs += underscore_problems(str(rel), text)
        for name in re.findall(r"\\input\{([^}]+)\}", text):
            q = PAPER / name
            if not (q.exists() or q.with_suffix(".tex").exists()):
                probs.append(f"{rel}: \\input{{{name}}}: no such file")
        for name in re.findall(r"\\includegraphics(?:\[[^]]*\])?\{([^}]+)\}", text):
            if not (PAPER / "figures" / name).exists():
                probs.append(f"{rel}: figure {name} not in paper/figures")
    alltext = "\n".join(src.values())
    labels = re.findall(r"\\label\{([^}]+)\}", alltext)
    probs += [f"label {lab} defined {labels.count(lab)} times" for lab in sorted(set(labels)) if labels.count(lab) > 1]
    for lab in sorted(set(re.findall(r"\\(?:eq)?ref\{([^}]+)\}", alltext)) - set(labels)):
        probs.append(f"\\ref{{{lab}}} has no \\label")
    bib = (PAPER / "references.bib").read_text()
    keys = set(re.findall(r"@\w+\{\s*([^,\s]+)\s*,", bib))
    for group in re.findall(r"\\cite[tp]?(?:\[[^]]*\])?\{([^}]+)\}", alltext):
        for key in (k.strip() for k in group.split(",")):
            if key not in keys:
                probs.append(f"\\cite{{{key}}} not in references.bib")
    defined = set(re.findall(r"\\newcommand\{?\\([A-Za-z]+)\}?", alltext))
    used = set(re.findall(r"\\([a-z]+[A-Z][A-Za-z]*)", alltext))
    probs += [f"macro \\{m} is used but never defined" for m in sorted(used - defined - BUILTIN_CAMEL)]
    return probs


def main() -> int:
    probs = check()
    for p in probs:
        print(p)
    if not probs:
        print("ok")
    return 1 if probs else 0


if __name__ == "__main__":
    raise SystemExit(main())
