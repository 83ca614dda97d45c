"""chunk/ — stage 03: documents into heading-aware chunks.

markdown_blocks (the CommonMark block structure), structure (plain text and PDF outlines
as blocks), headings (a heading's text, the trail), doctext (a document's lines, offsets,
pages and budget sizes), csv_chunks (whole records under their header), unchunked (what
gives no chunk, and why), fastpath (one-line records chunked a column at a time).
"""
