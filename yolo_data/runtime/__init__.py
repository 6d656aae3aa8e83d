"""What the process and the machine give: private torch calls, free space and locks, DataLoader worker set-up.

Modules, in the order data flows through them:

    torch_private  every private torch call, each with its public fallback
    room           free space, the lock under which a cache plans its share, the workers' shared memory
    workers        what each DataLoader worker sets up, OpenCV's thread pool across a fork, workers ending with their parent
    workerheap     workers keep the heap memory they free
"""
from .room import fit_workers_to_shm, shm_bytes_for_batches
from .torch_private import disabled_torch_function, new_shared_storage, second_mapping, sharing_record
from .workers import WorkerInit, guard_opencv_pool

__all__ = ["disabled_torch_function", "new_shared_storage", "second_mapping", "sharing_record",
           "fit_workers_to_shm", "shm_bytes_for_batches", "WorkerInit", "guard_opencv_pool"]
