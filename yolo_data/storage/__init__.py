"""Where bytes live: datasets in buckets, the local object cache, and the file container of every cache with its
trust rule.

Modules, in the order data flows through them:

    remote       every request to an S3-compatible bucket: read, ranged read, stat, list, exists
    s3client     the S3 client: endpoint, credentials, request counting
    s3list       a folder's listing in pages, in key ranges at once
    keyspace     where to cut a folder's keys into ranges
    remotefile   an object as a read-only seekable file over ranged reads
    objectcache  fetched objects kept on local disk, bounded in size
    trust        who must own a cache file or folder and who may write it
    container    the file format of every cache: layout, checksum, checks, reserved atomic writes
"""
from .keyspace import cut_after
from .objectcache import ObjectCache
from .container import CacheError, NoSpaceError, check_trust

__all__ = ["cut_after", "ObjectCache", "CacheError", "NoSpaceError", "check_trust"]
