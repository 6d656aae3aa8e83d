"""Adapters over ``build``: the functions YOLOv5's scripts call, and the Ultralytics plug-in.

    yolov5              YOLOv5's ``create_dataloader`` (``from yolo_data import create_dataloader``)
    yolov5_segment      YOLOv5-seg's ``create_dataloader``
    torch_utils         YOLOv5's torch functions: device choice, timing, seeding, DDP
    ultralytics         the Ultralytics trainer and validator (the only module that imports Ultralytics)
    ultralytics_args    Ultralytics' arguments to ``Settings``, every key accounted for
    ultralytics_batch   yolo_data's batches in Ultralytics' form
    ultralytics_loader  the dataset and loader as Ultralytics' trainer uses them
    ultralytics_group   the trainer as one DDP rank of a process group set up before it (Ray Train)
    ray                 the loader of a Ray Train worker, its place kept in Ray's checkpoints (the only
                        module that imports Ray)

Nothing is imported here, so that ``import yolo_data`` never imports Ultralytics or Ray.
"""
