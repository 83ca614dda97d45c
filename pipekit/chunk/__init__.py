"""chunk/ — stage 03: documents into heading-aware chunks.

markdown_blocks (the CommonMark block structure), structure (plain text and PDF outlines
as blocks), headings (a heading's text, the trail), anchors (the id each chunk's heading
has where the document is read), doctext (a document's lines, offsets, pages and budget
sizes), csv_chunks (whole records under their header), unchunked (what gives no chunk, and
why), shares (documents that swamp the index, named in the summary), rows (the output's
columns and what `finish` derives from a chunk), fastpath (one-line records chunked a
column at a time).
"""
