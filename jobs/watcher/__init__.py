"""The cluster watcher: `python manage.py watch_cluster`.

- leader.py: leader election on a coordination.k8s.io/v1 Lease (one writer at a time).
- informer.py: list + watch of one collection into a local cache, resuming from the stored
  resourceVersion, relisting on 410 Gone, reconnecting with backoff and jitter.
- processor.py: turns cached objects into job state changes, timeline events, pod records and
  queue usage, all written through jobs.services.
"""
