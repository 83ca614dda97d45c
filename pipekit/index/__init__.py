"""index/ — stage 04: chunks into BM25 term statistics (and, optionally, vectors).

analyzer (text into terms: stage 05 queries with the same one), counting (the sparse
matrix steps), link_text (Markdown links counted by their text, not their address), layout
(the postings cut into shards by document), dense (one vector per chunk from a model that
never downloads).
"""
