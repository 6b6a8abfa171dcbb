"""Data commands: ``prepare``."""

from __future__ import annotations

import argparse
import json

from training.cli.common import DEFAULT_DATA


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="BVH files, folders or archives -> a model-space pose "
                       "dataset (.npz) split by clip or by subject")
    p.add_argument("--bvh", nargs="+", required=True, metavar="PATH",
                   help="BVH files, folders (recursive) or archives (.tar.xz, .tar.gz, .zip)")
    p.add_argument("--out", default=DEFAULT_DATA, help="output .npz (default %(default)s)")
    p.add_argument("--map", default="auto", dest="map_spec",
                   help="skeleton mapping: auto, a preset name or a JSON file (default auto)")
    p.add_argument("--units", default="auto", help="auto, m, cm, mm or in (default auto)")
    p.add_argument("--up", default="auto", choices=("auto", "y", "z"),
                   help="each --bvh entry's up axis: y (BVH's convention), z (Blender's BVH "
                   "exporter), or auto: z where most of its first clips have their spines "
                   "along +Z (default auto)")
    p.add_argument("--split", nargs=3, type=float, default=(0.8, 0.1, 0.1),
                   metavar=("TRAIN", "VAL", "TEST"), help="clip fractions (default 0.8 0.1 0.1)")
    p.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    p.add_argument("--split-by", default="auto", choices=("auto", "clip", "subject"),
                   help="split unit per --bvh dataset: auto = by subject where every clip is "
                   "<subject>/<subject>_<trial>.bvh (CMU), else by clip (default auto)")
    p.add_argument("--exclude-first-frame", default="auto", dest="first_frame",
                   choices=("auto", "always", "never"),
                   help="drop each clip's frame 0: auto = when it is a synthetic T-pose "
                   "(CMU's Daz-friendly BVH), always, never (default auto)")
    p.add_argument("--workers", type=int, default=None,
                   help="parser processes (default: one per core)")
    p.add_argument("--json", default=None, help="also write the summary (counts, split, time, "
                   "skipped clips with their reasons) to this JSON file")
    p.set_defaults(run=_run_prepare)


def _run_prepare(args: argparse.Namespace) -> int:
    from training.data.dataset import prepare

    summary = prepare(args.bvh, args.out, map_spec=args.map_spec, units=args.units,
                      fractions=args.split, seed=args.seed, workers=args.workers,
                      first_frame=args.first_frame, split_by=args.split_by, up=args.up)
    print(f"clips: {summary['clips']}  frames: {summary['frames']}  "
          f"skipped files: {len(summary['skipped'])}  elapsed: {summary['elapsed_s']:.1f} s")
    for d in summary["datasets"]:
        print(f"{d['path']}: {d['clips']} clips, {d['frames']} frames, {d['up'].upper()}-up, "
              f"split by {d['split_by']} "
              f"({d['groups']} {'subjects' if d['split_by'] == 'subject' else 'clips'}), "
              f"frame 0 dropped in {d['first_frame_dropped']} clips; train/val/test clips "
              + " / ".join(str(v) for v in d["split_clips"].values()) + ", frames "
              + " / ".join(str(v) for v in d["split_frames"].values()))
    print("split (clips): " + ", ".join(f"{k} {v}" for k, v in summary["split_clips"].items()))
    print("split (frames): " + ", ".join(f"{k} {v}" for k, v in summary["split_frames"].items()))
    for note in summary["notes"]:
        print(f"note: {note}")
    print("source bone lengths (m): " + json.dumps(summary["bone_lengths"]))
    print(f"wrote {summary['out']}")
    if args.json:
        from blender_addon.core.fileio import write_json

        write_json(args.json, {"command": args.command_line, **summary})
        print(f"wrote {args.json}")
    return 0
