"""Development tooling: the local Kafka broker, its jars, and the demo. The service never imports this package.

It ships in the wheel (``slidingwindow broker start|stop|status``, ``slidingwindow demo``) but the image does not
need it: the running service depends only on ``service`` -> ``connectors`` -> ``windowstore``.
"""
