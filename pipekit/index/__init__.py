"""index/ — stage 04: chunks into BM25 term statistics (and, optionally, vectors).

analyzer (text into terms: stage 05 queries with the same one), counting (the sparse
matrix steps), links (Markdown links counted by their text), dense (one vector per chunk
from a model that never downloads).
"""
