"""The dataset report as one self-contained HTML page, made from the report's figures (compose.py's
JSON) and its pictures: no script, font, style sheet or picture is fetched from anywhere (pictures are
``data:`` URIs, charts inline SVG), so the page opens offline, attached to a CI run or an e-mail."""
from __future__ import annotations

import html
from typing import Dict, List, Optional, Sequence

from ..labels.summary import plural

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #d8dce3;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#5f6b7a}
table{border-collapse:collapse;background:#fff;margin:6px 0 12px}th,td{border:1px solid #d8dce3;padding:3px 8px;text-align:right}
th{background:#eef1f5}td.l,th.l{text-align:left}td.bad{background:#fde2e1}td.warn{background:#fff3cd}
.badges{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0}.badge{border-radius:6px;padding:6px 10px;background:#e3f4e8}
.badge.bad{background:#fde2e1}.badge.warn{background:#fff3cd}.badge b{font-size:16px;margin-right:4px}
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart{background:#fff;border:1px solid #d8dce3;padding:8px}
.chart svg text{font-size:10px;fill:#1d2330}details{margin:2px 0}summary{cursor:pointer}
ul.files{margin:4px 0 8px;padding-left:22px;max-height:320px;overflow:auto;font-family:ui-monospace,monospace;font-size:12px}
img.pic{max-width:100%;border:1px solid #d8dce3;background:#fff;display:block;margin:6px 0 14px}
code{font-family:ui-monospace,monospace;font-size:12px}
"""

SEVERE = {"corrupt", "empty-split", "leakage", "sequence-leakage", "label-conflict", "missing-class"}
EXPLAIN = {
    "corrupt": "images left out", "warnings": "problems fixed or tolerated", "empty-split": "splits without images",
    "leakage": "pictures in two splits", "duplicates": "pictures twice in a split",
    "sequence-leakage": "video frames near a training frame",
    "label-conflict": "duplicates with other labels", "missing-class": "classes absent from a split",
    "tiny-boxes": "boxes the candidate filter drops", "data-changed": "splits changed since the checkpoint's training",
}


def e(value) -> str:
    """``value`` as HTML text (a file name that is not UTF-8 shows its bytes as replacement marks)."""
    text = str(value).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return html.escape(text, quote=True)


def _n(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" if isinstance(v, float) else e(v)


def bar_chart(title: str, labels: Sequence[str], counts: Sequence[float], note: str = "") -> str:
    """An inline SVG bar chart: one bar per label, its count above it."""
    # each bar as wide as its label (about 6 px a character at 10 px) or its count, at least 30 px
    step = max([30] + [6 * len(str(v)) + 10 for v in list(labels) + [_n(c) for c in counts]])
    w, h, top, bottom = max(240, step * len(labels)), 170, 18, 34
    peak = max(list(counts) + [1])
    parts = [f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{e(title)}">']
    for i, (label, c) in enumerate(zip(labels, counts)):
        bh = (h - top - bottom) * (c / peak)
        x = i * step + 4
        parts.append(f'<rect x="{x:.1f}" y="{h - bottom - bh:.1f}" width="{step - 8:.1f}" height="{bh:.1f}" fill="#4c78a8"/>')
        parts.append(f'<text x="{x + (step - 8) / 2:.1f}" y="{h - bottom - bh - 4:.1f}" text-anchor="middle">{_n(c)}</text>')
        parts.append(f'<text x="{x + (step - 8) / 2:.1f}" y="{h - bottom + 14:.1f}" text-anchor="middle">{e(label)}</text>')
    parts.append("</svg>")
    return (f'<div class="chart"><div><b>{e(title)}</b></div>{"".join(parts)}'
            + (f'<div class="muted">{e(note)}</div>' if note else "") + "</div>")


def _bins(edges: Sequence[float], fmt=lambda v: f"{v:g}") -> List[str]:
    out = [f"{fmt(a)}–{fmt(b)}" for a, b in zip(edges[:-1], edges[1:])]
    return out + [f"≥{fmt(edges[-1])}"]


def _count_bins(edges: Sequence[float]) -> List[str]:
    out = [str(int(a)) if b - a == 1 else f"{int(a)}–{int(b) - 1}" for a, b in zip(edges[:-1], edges[1:])]
    return out + [f"{int(edges[-1])}+"]


def _ratio_bins(edges: Sequence[float]) -> List[str]:
    def f(v):
        return f"{v:g}" if v >= 1 else f"1/{1 / v:g}"
    return [f"<{f(edges[1])}"] + [f"{f(a)}–{f(b)}" for a, b in zip(edges[1:-2], edges[2:-1])] + [f"≥{f(edges[-2])}"]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    th = "".join(f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else (f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>")
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _findings(f: dict) -> str:
    out = []
    for k, v in f["findings"].items():
        cls = "" if not v else "bad" if k in SEVERE else "warn"
        out.append(f'<div class="badge {cls}"><b>{_n(v)}</b>{e(k)} <span class="muted">({e(EXPLAIN[k])})</span></div>')
    return f'<div class="badges">{"".join(out)}</div>'


def _splits(f: dict) -> str:
    head = ["split", "images", "objects", "polygons", "backgrounds", "left out", "warnings", "no label file",
            "format", "label cache"]
    rows = []
    for name, s in f["splits"].items():
        if "error" in s:
            source = ", ".join(s["source"]) if isinstance(s["source"], list) else s["source"]
            rows.append([e(name), f'<td class="bad" colspan="9">cannot read {e(source)}: {e(s["error"])}</td>'])
            continue
        obj = _n(s["objects"]) + (f' <span class="muted">({s["keypoints_per_object"]} keypoints each)</span>'
                                  if s["keypoints_per_object"] else "")
        rows.append([e(name), _n(s["images"]) if s["images"] else '<td class="bad">0</td>', obj, _n(s["polygons"]),
                     _n(s["backgrounds"]), f'<td class="bad">{_n(s["left_out"])}</td>' if s["left_out"] else "0",
                     f'<td class="warn">{_n(s["warnings"])}</td>' if s["warnings"] else "0",
                     _n(s["missing_label_files"]), e(s["format"]), _cache(s)])
    return _table(head, rows)


def _bands(f: dict) -> str:
    """Images by band count and bit depth in each split (every image the scan kept), and the dataset's
    channels: images of other bands are left out and named under Problems."""
    rows = []
    for name, s in f["splits"].items():
        for r in s.get("image_bands", []):
            rows.append([e(name), _n(r["bands"]) if r["bands"] else "unknown", f"{r['bits']}-bit" if r["bits"] else "",
                         _n(r["images"])])
    if not rows:
        return '<p class="muted">No image scanned.</p>'
    channels = f["settings"].get("channels", 3)
    left = sum(s.get("other_bands", 0) for s in f["splits"].values())
    note = (f"<p>The dataset has channels: {channels}"
            + (f"; {plural(left, 'image')} of other bands left out (see Problems)." if left else ".") + "</p>")
    return _table(["split", "bands", "bit depth", "images"], rows) + note


def _cache(s: dict) -> str:
    if not s["cache_file"]:
        return "not written"
    how = "built" if s.get("cache_built") else "read"
    return f'<code>{e(s["cache_file"])}</code> <span class="muted">({how})</span>'


def _problems(f: dict) -> str:
    out = []
    for name, s in f["splits"].items():
        for kind, groups in s.get("problems", {}).items():
            for group, items in groups.items():
                files = "".join(f"<li>{e(p['file'])}: {e(p['reason'])}</li>" for p in items)
                out.append(f'<details><summary><b>{e(name)}</b> · {e(kind)} · {e(group)} '
                           f'<span class="muted">({len(items):,} file{"s" if len(items) > 1 else ""})</span></summary>'
                           f'<ul class="files">{files}</ul></details>')
    return "".join(out) or '<p class="muted">No problem found: every listed image was read with its labels.</p>'


def _classes(f: dict) -> str:
    splits = [k for k, s in f["splits"].items() if s.get("objects")]
    sampled = f.get("sampled")
    head = ["id", "class"] + [f"{e(k)} objects (images)" for k in splits]
    if sampled:
        head += [f"{e(sampled['split'])} share of objects", f"sampled share (class_balance={sampled['threshold']:g})"]
        raw_total = sum(f["splits"][sampled["split"]]["classes"]["instances"]) or 1
        sampled_total = sum(sampled["class_instances"]) or 1
    rows = []
    for r in f["classes"]:
        row = [str(r["id"]), e(r["name"])]
        for k in splits:
            cell = f'{_n(r["instances"][k])} ({_n(r["images"][k])})'
            row.append(f'<td class="bad">{cell}</td>' if k in r["absent_from"] else cell)
        if sampled:
            raw = f["splits"][sampled["split"]]["classes"]["instances"]
            c = r["id"]
            row += [f"{100 * (raw[c] if c < len(raw) else 0) / raw_total:.2f}%",
                    f"{100 * (sampled['class_instances'][c] if c < len(sampled['class_instances']) else 0) / sampled_total:.2f}%"]
        rows.append(row)
    out = _table(head, rows, left=2)
    lines = []
    for k in splits:
        imb = f["splits"][k].get("imbalance")
        if imb:
            lines.append(f"<li><b>{e(k)}</b>: commonest {e(imb['commonest']['name'])} "
                         f"({e(plural(imb['commonest']['instances'], 'object'))}), rarest {e(imb['rarest']['name'])} "
                         f"({_n(imb['rarest']['instances'])}): {imb['ratio']:,.1f}× apart</li>")
    for m in f["missing_classes"]:
        lines.append(f"<li><b>{e(m['name'])}</b> has no object in {e(', '.join(m['absent_from']))}"
                     + (f" (present in {e(', '.join(m['present_in']))})" if m["present_in"] else " nor anywhere else")
                     + "</li>")
    if sampled:
        lines.append(f"<li>With class_balance={sampled['threshold']:g}, an epoch of {e(sampled['split'])} draws "
                     f"{_n(sampled['epoch_length'])} items from {_n(sampled['images'])} images (largest repeat "
                     f"factor {sampled['largest_factor']:.2f}).</li>")
    return out + (f"<ul>{''.join(lines)}</ul>" if lines else "")


def _geometry(f: dict) -> str:
    out = []
    for name, s in f["splits"].items():
        if "box_size" not in s:
            continue
        bs, ar, im = s["box_size"], s["aspect_ratio"], s["image_sizes"]
        charts = [
            bar_chart("objects per image", _count_bins(s["boxes_per_image"]["edges"]), s["boxes_per_image"]["counts"],
                      f"mean {s['boxes_per_image']['mean']:.2f}, most {s['boxes_per_image']['max']}"),
            bar_chart(f"object size at {bs['img_size']} px (√(w·h), letterboxed)", _bins(bs["edges"]), bs["counts"],
                      f"{bs['dropped_by_filter']:,} with a side ≤ 2 px (dropped by the candidate filter), "
                      f"{bs['below_finest_stride']:,} below one {bs['finest_stride']}-px cell"),
            bar_chart("aspect ratio (w/h)", _ratio_bins(ar["edges"]), ar["counts"],
                      f"{ar['beyond_filter']:,} at 100:1 or beyond (dropped by the candidate filter)"),
            bar_chart("image width (px)", _bins(im["width"]["edges"], lambda v: f"{v:g}"), im["width"]["counts"]),
            bar_chart("image height (px)", _bins(im["height"]["edges"], lambda v: f"{v:g}"), im["height"]["counts"]),
        ]
        o = im["orientation"]
        common = ", ".join(f"{w}×{h} ({c:,})" for w, h, c in im["common"][:6])
        out.append(f"<h3>{e(name)}</h3><div class='charts'>{''.join(charts)}</div>"
                   f"<p>{im['distinct']:,} distinct image sizes; commonest: {e(common)}. "
                   f"Orientation: {o['landscape']:,} landscape, {o['portrait']:,} portrait, {o['square']:,} square.</p>")
    return "".join(out)


def _duplicates(f: dict) -> str:
    d = f["duplicates"]
    if not d.get("checked"):
        return '<p class="muted">Not checked (the report was made without reading images).</p>'
    groups = d["groups"]
    intro = (f"<p>{d['images_read']:,} images read in {d['seconds']:.1f} s: {len(groups):,} "
             f"group{'' if len(groups) == 1 else 's'} of the same or a near-identical picture "
             f"({sum(g['across'] for g in groups):,} across splits).</p>")
    rows = []
    for g in groups:
        members = "<br>".join(f"{e(m['split'])}: <code>{e(m['file'])}</code> ({plural(m['objects'], 'object')})"
                              for m in g["members"])
        rows.append([e("identical files" if g["kind"] == "identical" else "near-identical: re-encoded, resized, or neighbouring video frames"),
                     f'<td class="bad">{e(" and ".join(g["splits"]))}</td>' if g["across"] else e(g["splits"][0]),
                     "yes" if g["labels_agree"] else '<td class="bad">no</td>', f'<td class="l">{members}</td>'])
    unread = "".join(f"<li>{e(u['file'])}: {e(u['reason'])}</li>" for u in d["unreadable"])
    flat = "".join(f"<li>{e(m['split'])}: {e(m['file'])} ({plural(m['objects'], 'object')})</li>" for m in d.get("flat", []))
    return (intro + (_table(["kind", "splits", "labels agree", "images"], rows) if rows else "")
            + (f"<details><summary>{plural(len(d['unreadable']), 'image')} could not be read</summary>"
               f"<ul class='files'>{unread}</ul></details>" if unread else "")
            + (f"<details><summary>{plural(len(d['flat']), 'flat picture')} (one colour: black, white or gray "
               "frames): their hashes describe nothing, so they are grouped only with byte-identical copies"
               f"</summary><ul class='files'>{flat}</ul></details>" if flat else ""))


def _sequences(f: dict) -> str:
    """Recordings of numbered frames, the videos among them, val/test frames near a training frame per split,
    examples, and the runs of neighbouring frames that straddle splits (leakage.py's figures)."""
    s = f.get("sequences", {})
    if not s.get("checked"):
        return f'<p class="muted">Not checked ({e(s.get("why", "the images were not read"))}).</p>'
    k, recs = s["frames"], s["recordings"]
    intro = (f"<p>{plural(s['recordings_total'], 'recording')} of numbered frames (2 images or more), "
             f"{plural(s['videos'], 'video')} among them: neighbouring frames look alike. The others are photos "
             f"numbered by an id and are not counted. {plural(s['runs_across'], 'run')} of video frames at most "
             f"{k} apart straddle splits.</p>")
    near = _table(["split", "images", f"within {k} frames of a training frame"],
                  [[e(n), _n(f["splits"][n]["images"]), f'<td class="bad">{_n(c)}</td>' if c else "0"]
                   for n, c in s["near_training"].items()]) if s["near_training"] else ""
    examples = _table(["split", "image", "nearest training frame", "frames apart"],
                      [[e(x["split"]), f"<code>{e(x['file'])}</code>", f"<code>{e(x['train_file'])}</code>",
                        _n(x["frames_apart"])] for x in s["examples"]], left=3) if s["examples"] else ""
    rows = [[f"<code>{e(r['name'])}</code>", "yes" if r["video"] else "no",
             e(", ".join(f"{n} {c:,}" for n, c in r["images"].items())), _n(r["runs"]),
             f'<td class="bad">{_n(r["runs_across"])}</td>' if r["runs_across"] and r["video"] else _n(r["runs_across"])]
            for r in recs]
    listed = (f"<details><summary>{len(recs):,} of {plural(s['recordings_total'], 'recording')} listed</summary>"
              + _table(["recording", "video", "images", f"runs (frames at most {k} apart)", "runs across splits"],
                       rows, left=3) + "</details>") if recs else ""
    return intro + near + examples + listed


def _checkpoint(f: dict) -> str:
    """The checkpoint's splits against the dataset now (checkpoint.compare_record's figures)."""
    c = f["checkpoint"]
    if not c["recorded"]:
        return (f"<p><code>{e(c['file'])}</code>: no record of its data (not trained through yolo_data's "
                "Ultralytics plug-in): not compared.</p>")
    bad = '<td class="l bad">{}</td>'
    rows = [[e(name), e(r["text"]) if r["status"] in ("same", "not-compared") else bad.format(e(r["text"])),
             _n(r["images_then"]), _n(r["images_now"]) if r["images_now"] is not None else "",
             f"<code>{e(r['digest_then'])}</code>", f"<code>{e(r['digest_now'] or '')}</code>"]
            for name, r in c["splits"].items()]
    return (f"<p><code>{e(c['file'])}</code> was trained on <code>{e(c['data'])}</code> with yolo_data "
            f"{e(c['yolo_data'])}.</p>" + _table(["split", "data", "images then", "images now", "digest then",
                                                  "digest now"], rows, left=2))


def _pictures(f: dict, images: Dict[str, str]) -> str:
    out = []
    batches = [k for k in f.get("pictures", []) if k.startswith("batch")]
    if batches:
        out.append("<h3>Training batches as the loader makes them</h3>")
        if f.get("pictures_show"):
            out.append(f'<p class="muted">The pictures show {e(f["pictures_show"])}.</p>')
        out += [f'<img class="pic" alt="training {e(k)}" src="{images[k]}">' for k in batches if k in images]
    rare = [k for k in f.get("pictures", []) if k.startswith("class")]
    if rare:
        out.append("<h3>Objects of the rarest classes</h3>")
        for k in rare:
            c = int(k[5:])
            name = f["names"][c] if c < len(f["names"]) else str(c)
            out.append(f"<div>{e(name)}</div><img class='pic' alt='objects of {e(name)}' src='{images[k]}'>")
    return "".join(out) or '<p class="muted">No pictures (made without them, or no labelled training images).</p>'


def render(figures: dict, images: Optional[Dict[str, str]] = None) -> str:
    """The page for ``figures`` (compose.py's JSON) and ``images`` (picture name -> data URI)."""
    f, images = figures, images or {}
    st = f["settings"]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Dataset report: {e(f['data'])}</title><style>{STYLE}</style></head><body><main>"
        f"<h1>Dataset report: {e(f['data'])}</h1>"
        f"<div class='muted'>yolo_data {e(f['yolo_data'])} · {e(f['created'])} · task {e(st['task'])} · "
        f"sizes at img_size {st['img_size']} · {len(f['names'])} classes · made in {f['seconds']:.1f} s</div>"
        f"<h2 id='findings'>Findings</h2>{_findings(f)}"
        f"<h2 id='splits'>Splits</h2>{_splits(f)}"
        + (f"<h2 id='checkpoint'>Checkpoint</h2>{_checkpoint(f)}" if "checkpoint" in f else "") +
        f"<h2 id='bands'>Bands</h2>{_bands(f)}"
        f"<h2 id='problems'>Problems</h2>{_problems(f)}"
        f"<h2 id='classes'>Classes</h2>{_classes(f)}"
        f"<h2 id='duplicates'>Duplicates and leakage</h2>{_duplicates(f)}"
        f"<h2 id='sequences'>Frames of videos across splits</h2>{_sequences(f)}"
        f"<h2 id='geometry'>Objects and images</h2>{_geometry(f)}"
        f"<h2 id='pictures'>Pictures</h2>{_pictures(f, images)}"
        "</main></body></html>\n")
