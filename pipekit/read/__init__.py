"""read/ — stages 01 and 02: from a folder of files to one cleaned text per document.

walk (which files are read, and why not the others: unknown formats, exclusions, copies of
a file already read), documents (one file into one row, dispatching to a reader per
format), one module per format — text (encodings), markdown, pdf, html (with html_markdown,
the converter), rst, csv, docx and epub (zips of XML, opened by zipped), notebook (.ipynb
cells) and python (.py docstrings) written as Markdown, beir (a BEIR corpus.jsonl) —
build_output (a documentation generator's leftovers), pages (PDF outline, page labels, the
furniture stage 02 drops), fastpath (stages 01–02 a column at a time for short records).
"""
