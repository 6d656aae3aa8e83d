"""Write a COCO JSON (an export as Roboflow or CVAT make them, quirks included) from a Pascal VOC folder,
to check yolo_data's COCO reading against its VOC reading, pycocotools and Ultralytics' convert_coco.

Layout written under ``out``: ``_annotations.coco.json`` and ``images/cells/<photo>.jpg`` (hard links or
copies of the VOC photos; ``file_name`` is ``cells/<photo>.jpg``, a sub-folder, relative to the
``images/`` folder beside the JSON).  Quirks, each met by real exports:

- category 0 is a placeholder named after the dataset, the supercategory of the others (Roboflow);
- the real categories' ids start at 1 and have a gap (WBC 1, RBC 2, Platelets 5);
- ``bbox`` is [xmin - 1, ymin - 1, xmax - xmin, ymax - ymin] (VOC's 1-based corners), so each box is
  the one YOLOv5's VOC conversion makes; degenerate VOC boxes stay (width or height 0);
- with ``quirks``: one box reaches 0.5 px past the right edge; one ``iscrowd`` box; one image with no
  annotations; one annotation of an image id that is not in ``images``.
- every object gets a polygon (its box's corners cut by a quarter: an octagon) as ``segmentation``.

Run: ``python benchmarks/generators/coco_from_voc.py VOC_ROOT OUT [--list ImageSets/Main/train.txt]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import List, Optional

CATEGORIES = [{"id": 0, "name": "cells", "supercategory": "none"},
              {"id": 1, "name": "WBC", "supercategory": "cells"},
              {"id": 2, "name": "RBC", "supercategory": "cells"},
              {"id": 5, "name": "Platelets", "supercategory": "cells"}]
CAT_ID = {c["name"]: c["id"] for c in CATEGORIES[1:]}


def _octagon(x: float, y: float, w: float, h: float) -> List[float]:
    cx, cy = w / 4, h / 4
    pts = [(x + cx, y), (x + w - cx, y), (x + w, y + cy), (x + w, y + h - cy),
           (x + w - cx, y + h), (x + cx, y + h), (x, y + h - cy), (x, y + cy)]
    return [round(v, 2) for p in pts for v in p]


def write_coco(voc_root, out, ids: Optional[List[str]] = None, quirks: bool = True) -> Path:
    """Write the JSON and link the photos; returns the JSON's path.  ``ids``: VOC image ids (default:
    every XML)."""
    voc_root, out = Path(voc_root), Path(out)
    ids = ids or sorted(p.stem for p in (voc_root / "Annotations").glob("*.xml"))
    (out / "images" / "cells").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for k, i in enumerate(ids):
        root = ET.parse(voc_root / "Annotations" / f"{i}.xml").getroot()
        w, h = int(root.findtext("size/width")), int(root.findtext("size/height"))
        src, dst = voc_root / "JPEGImages" / f"{i}.jpg", out / "images" / "cells" / f"{i}.jpg"
        if not dst.exists():
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
        images.append({"id": 100 + k, "file_name": f"cells/{i}.jpg", "width": w, "height": h})
        if quirks and k == 1:
            continue  # an image without annotations: a background
        for obj in root.iter("object"):
            if obj.findtext("difficult", "0").strip() == "1":
                continue
            x1, y1, x2, y2 = (float(obj.findtext(f"bndbox/{t}")) for t in ("xmin", "ymin", "xmax", "ymax"))
            bbox = [x1 - 1, y1 - 1, x2 - x1, y2 - y1]
            anns.append({"id": len(anns) + 1, "image_id": 100 + k, "category_id": CAT_ID[obj.findtext("name").strip()],
                         "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": 0,
                         "segmentation": [_octagon(*bbox)] if bbox[2] > 0 and bbox[3] > 0 else []})
    if quirks:
        a = next(a for a in anns if a["image_id"] == 100)
        anns.append({**a, "id": len(anns) + 1, "bbox": [a["bbox"][0], a["bbox"][1], images[0]["width"] - a["bbox"][0] + 0.5,
                                                           a["bbox"][3]], "segmentation": []})
        anns.append({**a, "id": len(anns) + 1, "iscrowd": 1, "segmentation": {"size": [1, 1], "counts": "1"}})
        anns.append({**a, "id": len(anns) + 1, "image_id": 99999})
    path = out / "_annotations.coco.json"
    path.write_text(json.dumps({"info": {"description": "BCCD as a COCO export"}, "images": images,
                                "annotations": anns, "categories": CATEGORIES}))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("voc_root")
    ap.add_argument("out")
    ap.add_argument("--list", help="an ImageSets list (relative to VOC_ROOT) naming the ids to write")
    ap.add_argument("--no-quirks", action="store_true")
    a = ap.parse_args()
    ids = None
    if a.list:
        ids = [line.split()[0] for line in (Path(a.voc_root) / a.list).read_text().splitlines() if line.strip()]
    print(write_coco(a.voc_root, a.out, ids, not a.no_quirks))


if __name__ == "__main__":
    main()
