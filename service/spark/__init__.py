"""Everything that touches Spark, and the only package of the project that imports pyspark
(``tests/test_layering.py``): the streaming plan (:mod:`.job`), its ``transformWithState`` processor
(:mod:`.processor`, which hands a task's rows to :mod:`.task_rows`), the query listener (:mod:`.listener`), and
the Python daemon and worker Spark runs (:mod:`.python_daemon`, :mod:`.python_worker`), whose patches of pyspark's
internals apply only to the pyspark versions they were written for (:mod:`.compat`).
"""
