"""The task logic: one task's micro-batch (one Kafka input partition) without Spark, the process it runs in, or
the driver's metrics: the stats vocabulary (:mod:`.stats`), the task config (:mod:`.config`), the state protocol
and its formats (:mod:`.state`), the runner of one batch (:mod:`.runner`) and a batch against its state and a
worker cache given explicitly (:mod:`.batch`). Imports neither pyspark nor prometheus_client
(``tests/test_layering.py``).
"""
