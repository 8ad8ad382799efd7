"""Rate limits: token buckets per API key and per source address (SPEC §4, §11).

    from pml.limits.edge import RequestLimits        # what the HTTP edge applies
    from pml.limits.keyed import KeyedLimiter        # a bucket per key, bounded in memory
    from pml.limits.bucket import TokenBucket        # the arithmetic

Nothing here is imported by ``import pml``; the HTTP app builds one ``RequestLimits`` from
``[limits]``. The stdio path has no keys and no limits.
"""
