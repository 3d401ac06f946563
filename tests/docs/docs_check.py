#!/usr/bin/env python3
"""Checks the user documentation (README.md, docs/*.md) against the repository it ships in.

- Every relative link resolves to a file inside the repository (nothing like ../shared/, which
  exists in no clone or package), and every #anchor to a heading of its target.
- Every clause id (G1, S2, R3a, W4, ...) and every section (SPEC §10) that a test, script or
  source comment cites is explained in docs/: a clause as `**ID.**` or a list item starting
  `ID.`, a section as a heading starting `N.`.
- Every section a comment names by title (README "Life of a request", docs/operations.md
  "Threads") is a heading of that file.
- The docs describe the code as it is: no issue numbers and no session history.

usage: docs_check.py [REPO_ROOT]; prints each problem and exits 1 if there is any.
"""
import glob
import os
import re
import sys

ROOT = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else
                        os.path.join(os.path.dirname(__file__), '..', '..'))
SOURCE_DIRS = ['tests', 'scripts', 'proxy', 'store', 'conf', 'common', 'bench', 'packaging']
SOURCE_EXTS = ('.cc', '.h', '.c', '.py', '.sh', '.cmake', '.toml', '.service', '.txt', '.lua')
CLAUSE = re.compile(r'\b([GSKFCRWMAEH][1-9][0-9]?[ab]?)\b')
SECTION = re.compile(r'SPEC ?§ ?([0-9]+)\b|(?<![0-9.])§ ?([0-9]+)\b(?!\.[0-9])')
TITLE_REF = re.compile(r'(README(?:\.md)?|docs/[\w-]+\.md)[ ,]*"([^"\n]+)"')
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
HISTORY = re.compile(r'[Ii]ssue [0-9]+|[Tt]his session|[Ll]ast session|\.\./shared/')
# Docs written on other branches, linked before they land: while one is missing, a link to it is
# a note, not a failure. Once they all exist this set is empty work: delete it.
PENDING = {'docs/configuration.md', 'docs/several-instances.md', 'docs/install.md',
           'docs/layout.md'}


def read(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()


def prose_lines(text):
    """Yields (line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def headings(text):
    return [re.sub(r'^#+\s*', '', line).strip()
            for _, line in prose_lines(text) if re.match(r'#{1,6}\s', line)]


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r'[^\w\- ]', '', heading.lower())
    return text.replace(' ', '-')


def anchors(text):
    seen, out = {}, set()
    for h in headings(text):
        s = slug(h)
        out.add(s if s not in seen else f'{s}-{seen[s]}')
        seen[s] = seen.get(s, 0) + 1
    return out


def doc_files():
    files = [os.path.join(ROOT, 'README.md')] + sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md')))
    return [f for f in files if os.path.isfile(f)]


def source_files():
    for top in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            if 'corpus' in dirpath.split(os.sep):
                continue
            for name in names:
                if name.endswith(SOURCE_EXTS) or name in ('test', 'build', 'demo', 'bench', 'chaos', 'fuzz'):
                    yield os.path.join(dirpath, name)


def rel(path):
    return os.path.relpath(path, ROOT)


def check_links(doc, text, problems, notes):
    for number, line in prose_lines(text):
        for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
            if re.match(r'[a-z]+:', target):
                continue  # http://, mailto: and the like: not this repository's
            path, _, anchor = target.partition('#')
            dest = os.path.realpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            where = f'{rel(doc)}:{number}: link {target}'
            if dest != ROOT and not dest.startswith(ROOT + os.sep):
                problems.append(f'{where} leaves the repository')
            elif not os.path.exists(dest) and rel(dest) in PENDING:
                notes.add(f'{rel(dest)} is not written yet (linked from {rel(doc)})')
            elif not os.path.exists(dest):
                problems.append(f'{where}: {rel(dest)} does not exist')
            elif anchor and dest.endswith('.md') and anchor not in anchors(read(dest)):
                problems.append(f'{where}: no heading #{anchor} in {rel(dest)}')


def explained(docs_text):
    clauses = set(re.findall(r'\*\*([A-Z][0-9]+[ab]?)\.\*\*', docs_text))
    clauses |= set(re.findall(r'^\s*[-*]\s+(?:\*\*)?([A-Z][0-9]+[ab]?)\.', docs_text, re.M))
    sections = set(re.findall(r'^#{1,6}\s+§?([0-9]+)\.', docs_text, re.M))
    return clauses, sections


def check_citations(problems):
    docs_text = '\n'.join(read(f) for f in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
    clauses, sections = explained(docs_text)
    titles = {}
    for path in source_files():
        text = read(path)
        for number, line in enumerate(text.splitlines(), 1):
            where = f'{rel(path)}:{number}'
            for cid in CLAUSE.findall(line):
                if cid not in clauses:
                    problems.append(f'{where} cites {cid}, which no docs/*.md explains')
            for a, b in SECTION.findall(line):
                if (a or b) not in sections:
                    problems.append(f'{where} cites §{a or b}, which no docs/*.md heading is')
        # A title may be wrapped onto the next comment line: join comment lines first.
        for name, title in TITLE_REF.findall(re.sub(r'\n\s*(?://|#)\s*', ' ', text)):
            titles.setdefault((name, title), rel(path))
    for doc in doc_files():
        for number, line in prose_lines(read(doc)):
            for name, title in TITLE_REF.findall(line):
                titles.setdefault((name, title), f'{rel(doc)}:{number}')
    for (name, title), where in titles.items():
        target = os.path.join(ROOT, 'README.md' if name.startswith('README') else name)
        found = os.path.isfile(target) and any(
            title.lower() in h.replace('`', '').lower() for h in headings(read(target)))
        if not found:
            problems.append(f'{where} names {name} "{title}", which is no heading there')


def main():
    problems, notes = [], set()
    docs = doc_files()
    if not docs:
        problems.append('no README.md')
    for doc in docs:
        text = read(doc)
        check_links(doc, text, problems, notes)
        for number, line in enumerate(text.splitlines(), 1):
            m = HISTORY.search(line)
            if m:
                problems.append(f'{rel(doc)}:{number}: "{m.group(0)}": the docs describe the code '
                                'as it is; history lives in git')
    check_citations(problems)
    for n in sorted(notes):
        print('note:', n)
    for p in problems:
        print(p)
    print(f'docs_check: {len(docs)} files, {len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
