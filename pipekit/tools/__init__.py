"""tools/ — `python -m pipekit show|compare|report` and the run history they read.

show (look inside any output), history (every evaluated run's metrics), compare (what moved
between two runs), report (the whole run on one HTML page), inventory (the report's account
of what was not read, the largest documents, how the run scores).
"""
