"""Printed page labels on real PDFs: every chunk's labels against pypdf's reading of the PDF.

    python bench/page_labels.py [PDF ...] [--out DIR]

Default: R's manuals as Debian installs them (/usr/share/R/doc/manual/*.pdf, r-doc-pdf),
labelled T-1, T-2 on the title pages, i, ii, ... in the front matter, then 1, 2, ...
Each PDF runs through stages 01-03 on its own (outputs in DIR/<name>, default
bench/out/page_labels), and every chunk with pages must carry, as page_label_start and
page_label_end, the labels pypdf reads for its first and last page (pypdf: a second
reader, independent of PDFium, which stage 01 uses).  It prints, per PDF: pages, chunks,
chunks whose labels equal pypdf's, chunks whose label is not their physical page number
(what the citation's "(PDF page N)" is for), and the first mismatches if any.  Exit
status 1 on any mismatch.  Needs requirements-bench.txt (pypdf).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pypdf

REPO = Path(__file__).resolve().parents[1]
R_MANUALS = Path("/usr/share/R/doc/manual")


def check(pdf: Path, out: Path) -> tuple[int, int, int, int, list]:
    """(pages, chunks with pages, chunks whose labels equal pypdf's, chunks labelled
    other than their page number, first mismatches) for one PDF."""
    for script in ("01_documents.py", "02_preprocessing.py", "03_chunking.py"):
        proc = subprocess.run([sys.executable, script, "--set", f"paths.output={out}",
                               "--set", f"documents.input={pdf}"], cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{script} on {pdf} failed:\n{proc.stderr}")
    printed = pypdf.PdfReader(pdf).page_labels
    chunks = pd.read_parquet(out / "03_chunks.parquet").dropna(subset=["page_start"])
    got = list(zip(chunks.page_label_start, chunks.page_label_end))
    want = [(printed[int(a) - 1], printed[int(b) - 1]) for a, b in zip(chunks.page_start, chunks.page_end)]
    bad = [(cid, g, w) for cid, g, w in zip(chunks.chunk_id, got, want) if g != w]
    other = sum(str(int(p)) != s for p, s in zip(chunks.page_start, chunks.page_label_start))
    return len(printed), len(chunks), len(chunks) - len(bad), other, bad[:5]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pdfs", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "page_labels")
    args = parser.parse_args()
    pdfs = args.pdfs or sorted(R_MANUALS.glob("*.pdf"))
    if not pdfs:
        raise SystemExit(f"no PDF given and none in {R_MANUALS} (apt-get install r-doc-pdf)")
    print(f"{'PDF':<28} {'pages':>6} {'chunks':>7} {'equal':>7} {'label≠page':>11}")
    failed = 0
    for pdf in pdfs:
        pages, n, equal, other, bad = check(pdf, args.out / pdf.stem)
        print(f"{pdf.name:<28} {pages:>6} {n:>7} {equal:>7} {other:>11}")
        for cid, g, w in bad:
            print(f"    {cid}: labels {g}, pypdf reads {w}")
        failed += n - equal
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
