"""PDF text per page: pypdfium2 (PDFium, what stage 01 uses) against pypdf, in one run.

    python bench/pdf_readers.py [extra.pdf ...]

Reads the bundled sample (data/sample/field-guide.pdf), every PDF over 100 kB found
under /usr/share/doc (real TeX-made manuals on most Linux machines), any PDFs named on
the command line, and a 600-page PDF generated into bench/out/ from the Cranfield
abstracts (or the sample's own text when ../shared/data is absent).  For each file it
prints pages, the best of three wall times per reader, pages per second, and how far
the two readers agree on the words (so that "faster" does not mean "reads less").
The last column is stage 01's own reader (pypdfium2 plus page markers and paragraph
detection), to show what its extra work costs.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
OUT = REPO / "bench" / "out"
REPEATS = 3


def read_pdfium(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        pages = []
        for i in range(len(pdf)):
            page = pdf[i]
            textpage = page.get_textpage()
            pages.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return pages
    finally:
        pdf.close()


def read_pypdf(path: Path) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(str(path)).pages]


def read_stage01(path: Path) -> list[str]:
    """Stage 01's own reader: pypdfium2 plus page markers and paragraph gaps."""
    sys.path.insert(0, str(REPO))
    from pipekit.read.pdf import read_pdf

    return read_pdf(path.read_bytes())["text"].split("--- page ")[1:]


def best_time(reader, path: Path) -> tuple[float, list[str]]:
    best, pages = float("inf"), []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        pages = reader(path)
        best = min(best, time.perf_counter() - t0)
    return best, pages


def word_agreement(a: list[str], b: list[str]) -> float:
    """Share of words (as a multiset over the whole file) that both readers produced."""
    wa, wb = Counter(" ".join(a).split()), Counter(" ".join(b).split())
    union = sum((wa | wb).values())
    return sum((wa & wb).values()) / union if union else 1.0


def generated_pdf(pages: int = 600) -> Path:
    """A long PDF with a real text layer, made once into bench/out/ (git-ignored)."""
    target = OUT / f"generated-{pages}p.pdf"
    if target.exists():
        return target
    from fpdf import FPDF

    corpus = SHARED / "cranfield" / "beir" / "corpus.jsonl"
    if corpus.exists():
        texts = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    else:
        texts = (REPO / "scripts" / "sample_pdf.txt").read_text(encoding="utf-8").split("\n\n")
    pdf = FPDF()
    pdf.set_font("helvetica", size=10)
    pdf.set_auto_page_break(False)
    i = 0
    for _ in range(pages):
        pdf.add_page()
        while pdf.get_y() < 250:
            text = texts[i % len(texts)].encode("latin-1", "replace").decode("latin-1")
            pdf.multi_cell(0, 5, text)
            pdf.ln(2)
            i += 1
    OUT.mkdir(parents=True, exist_ok=True)
    pdf.output(str(target))
    return target


def main(argv: list[str]) -> int:
    files = [REPO / "data" / "sample" / "field-guide.pdf"]
    files += sorted(p for p in Path("/usr/share/doc").rglob("*.pdf") if p.stat().st_size > 100_000)
    files += [Path(a) for a in argv]
    files.append(generated_pdf())
    print(f"{'file':42} {'pages':>5} {'pypdfium2 s':>11} {'pypdf s':>9} {'speed-up':>8} "
          f"{'pdfium p/s':>10} {'pypdf p/s':>9} {'same words':>10} {'stage01 s':>9}")
    totals = Counter()
    for path in files:
        t_pdfium, pages_pdfium = best_time(read_pdfium, path)
        t_pypdf, pages_pypdf = best_time(read_pypdf, path)
        t_ours, _ = best_time(read_stage01, path)
        n = len(pages_pdfium)
        totals.update({"pages": n, "pdfium": t_pdfium, "pypdf": t_pypdf, "ours": t_ours})
        print(f"{path.name[:42]:42} {n:5d} {t_pdfium:11.3f} {t_pypdf:9.3f} {t_pypdf / t_pdfium:7.1f}x "
              f"{n / t_pdfium:10.0f} {n / t_pypdf:9.0f} {word_agreement(pages_pdfium, pages_pypdf):9.1%} "
              f"{t_ours:10.3f}")
    print(f"{'all files':42} {totals['pages']:5d} {totals['pdfium']:11.3f} {totals['pypdf']:9.3f} "
          f"{totals['pypdf'] / totals['pdfium']:7.1f}x {'':31} {totals['ours']:10.3f}   (best of {REPEATS} runs each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
