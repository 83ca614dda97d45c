"""retrieve/ — stage 05 and `search`: questions into ranked, citeable passages.

queries (queries and qrels files), ranks (best chunks and documents), sections (section
context in a chunk's score), fusion (BM25 with the cosine of dense vectors), filters
(`--in`/`--format`: a mask before ranking), links (where a hit opens: `doc_id#anchor`,
`#page=N`), results (the table, the metrics, the preview), resident (what a worker keeps
loaded), shards (stage 05 on a cluster, one part of the index per worker), search
(`pipekit.Searcher` and `python -m pipekit search`), warm (one query of a loaded Searcher,
the short way), cold (a query or two from a memory-mapped copy of the index).
"""
