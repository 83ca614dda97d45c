"""retrieve/ — stage 05 and `search`: questions into ranked, citeable passages.

queries (queries and qrels files), ranks (best chunks and documents), sections (section
context in a chunk's score), fusion (BM25 with the cosine of dense vectors), results (the
table, the metrics, the preview), resident (what a worker keeps loaded), search
(`pipekit.Searcher` and `python -m pipekit search`).
"""
