"""The ``slidingwindow`` command: one entry point over the product's packages (see :mod:`slidingwindow.cli`)."""
