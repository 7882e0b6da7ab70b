"""The Spark jobs (pipeline.md): generate, bulk_load, report, audit.

Each is ``python -m pipeline.<job>`` (or spark-submit); ``local[*]`` by default, a cluster
by changing only ``--master``.
"""
