#!/usr/bin/python3
"""mpiformer-plot: a run's curves from its --metrics files, as one PNG.

    mpiformer-plot RUN.jsonl [RUN.jsonl ...] --out curves.png [--labels A,B] [--size 1600x1000]

Panels: the training loss with the validation loss, the learning rate, the gradient norm, tok/s,
and the evaluation accuracies where the files hold any; several runs side by side, a colour each.
Reads only: each file as mpiformer-train --metrics writes it (a JSON object a line with a "kind").
Writes only --out, under a temporary name renamed into place, and never over an existing file
unless --overwrite is given (a plot refreshed while a run goes on).
"""
import argparse
import json
import os
import sys


class InputError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """A bad command line is one `error:` line and exit 2, as in the other programs."""

    def error(self, message):
        print(f"error: {message}; see mpiformer-plot --help", file=sys.stderr)
        sys.exit(2)


def read_run(path):
    """{kind: {step: record}}: the last record of a kind and step wins."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror}); pass a --metrics file")
    run = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if n == len(lines):  # the last line, cut short by a run that was stopped
                break
            raise InputError(f"{path}:{n}: not JSON; pass a file mpiformer-train --metrics wrote")
        if not isinstance(record, dict) or "kind" not in record or "step" not in record:
            raise InputError(f"{path}:{n}: not a metrics record (no kind or step); pass a file "
                             "mpiformer-train --metrics wrote")
        run.setdefault(record["kind"], {})[record["step"]] = record
    if not run.get("step"):
        raise InputError(f"{path}: holds no step records; pass the --metrics file of a run that "
                         "trained at least one step")
    return run


def series(run, kind, key):
    points = sorted((s, r[key]) for s, r in run.get(kind, {}).items()
                    if isinstance(r.get(key), (int, float)))
    return [p[0] for p in points], [p[1] for p in points]


def plot(runs, labels, out, size, overwrite):
    try:
        import matplotlib
    except ImportError:
        raise InputError(f"{sys.executable} has no matplotlib (Debian: apt-get install "
                         "python3-matplotlib); or run this script with a python3 that has it: "
                         "python3 $(command -v mpiformer-plot) ...")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    width, height = size
    has_eval = any(run.get("eval") for run in runs)
    panels = [("loss", "loss"), ("lr", "learning rate"), ("norm", "gradient norm"),
              ("tok_s", "tokens/s")] + ([("eval", "eval accuracy")] if has_eval else [])
    cols = 3 if len(panels) > 4 else 2
    rows = (len(panels) + cols - 1) // cols
    dpi = 100
    fig, axes = plt.subplots(rows, cols, figsize=(width / dpi, height / dpi), dpi=dpi, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run, label) in enumerate(zip(runs, labels)):
        c = colours[i % len(colours)]
        for ax, (key, title) in zip(axes.flat, panels):
            ax.set_title(title)
            ax.set_xlabel("step")
            if key == "loss":
                ax.plot(*series(run, "step", "loss"), color=c, lw=1, label=f"{label} train")
                vx, vy = series(run, "val", "loss")
                if vx:
                    ax.plot(vx, vy, color=c, lw=1.5, ls="--", marker="o", ms=3, label=f"{label} val")
            elif key == "eval":
                for field, style in (("acc", "-"), ("acc_norm", ":")):
                    ex, ey = series(run, "eval", field)
                    if ex:
                        ax.plot(ex, ey, color=c, ls=style, marker="o", ms=3, label=f"{label} {field}")
            else:
                ax.plot(*series(run, "step", key), color=c, lw=1, label=label)
    for ax, (key, _) in zip(axes.flat, panels):
        if ax.lines:
            ax.legend(fontsize="small")
        if key == "norm":
            ax.set_yscale("log")
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(out))
    tmp = os.path.join(directory, f".{os.path.basename(out)}.partial-{os.getpid()}.png")
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        if overwrite:
            os.replace(tmp, out)
        else:
            os.link(tmp, out)  # fails if out appeared meanwhile: never over a file
            os.unlink(tmp)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(f"--out {out}: cannot write it ({e.strerror}); choose another path")


def main(argv):
    ap = Parser(prog="mpiformer-plot", description=__doc__.split("\n\n")[0],
                                 usage="mpiformer-plot RUN.jsonl [RUN.jsonl ...] --out FILE.png "
                                       "[--labels A,B,...] [--size WxH] [--overwrite]")
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="--metrics files, one per run")
    ap.add_argument("--out", required=True, metavar="FILE.png", help="the PNG to write")
    ap.add_argument("--labels", help="a name per run, comma-separated (default: the file names)")
    ap.add_argument("--size", default="1600x1000", help="pixels, WxH (default 1600x1000)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = ap.parse_args(argv)
    try:
        try:
            width, height = (int(v) for v in args.size.lower().split("x"))
            assert 100 <= width <= 10000 and 100 <= height <= 10000
        except (ValueError, AssertionError):
            raise InputError(f"--size {args.size}: give WxH in pixels, each 100 to 10000, e.g. 1600x1000")
        labels = args.labels.split(",") if args.labels else \
            [os.path.splitext(os.path.basename(p))[0] for p in args.runs]
        if len(labels) != len(args.runs):
            raise InputError(f"--labels gives {len(labels)} names for {len(args.runs)} runs; "
                             "give one per run")
        if not args.out.lower().endswith(".png"):
            raise InputError(f"--out {args.out}: the plot is a PNG; name it FILE.png")
        if os.path.exists(args.out) and not args.overwrite:
            raise InputError(f"--out {args.out} exists; choose another path, or pass --overwrite")
        if any(os.path.abspath(args.out) == os.path.abspath(p) for p in args.runs):
            raise InputError(f"--out {args.out} is one of the runs' files; choose another path")
        runs = [read_run(p) for p in args.runs]
        plot(runs, labels, args.out, (width, height), args.overwrite)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(runs)} run(s), {width}x{height}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
