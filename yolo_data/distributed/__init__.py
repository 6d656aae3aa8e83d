"""Distributed training: ranks asked at call time, rank 0 first, the job-wide hand-off, rank agreement.

Modules, bottom first:

    keys       the process group's store: keys that callers name, waits without a time limit
    ranks      rank, world size, local rank and the ranks of this node, asked when called
    zerofirst  rank 0 first: local rank 0 does the work, the others wait and read its result
    handoff    global rank 0 hands a result to the other nodes' local ranks 0
    agree      every rank compares its dataset's numbers with the others' before the first batch

Every exchange through the store is under a key named by its caller (what is built or compared), so
ranks pair the same things whatever order they do them in; see keys.py.
"""
from .agree import RanksDisagreeError, check_ranks_agree
from .handoff import job_publish, job_publish_error, job_receive, job_share_key, nodes_in_job
from .keys import ZeroFirstError, named_key
from .ranks import (NodeRanks, get_local_rank, get_rank, get_world_size, is_initialized, known_local_world_size,
                    known_node_ranks, local_world_size, node_ranks)
from .zerofirst import current_block, report_progress, share_from_local_rank_0, torch_distributed_zero_first, \
    wait_for_the_master

__all__ = ["ZeroFirstError", "named_key", "NodeRanks", "get_local_rank", "get_rank", "get_world_size",
           "is_initialized", "known_local_world_size", "known_node_ranks", "local_world_size", "node_ranks",
           "current_block", "report_progress", "share_from_local_rank_0", "torch_distributed_zero_first",
           "wait_for_the_master", "job_publish", "job_publish_error", "job_receive", "job_share_key",
           "nodes_in_job", "RanksDisagreeError", "check_ranks_agree"]
