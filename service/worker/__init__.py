"""The Python worker process's side of a task: its cache of processors (:mod:`.cache`), one task batch at a time
against it (:mod:`.run`) and task owners (:mod:`.owners`). Imports no pyspark (``tests/test_layering.py``).
"""
