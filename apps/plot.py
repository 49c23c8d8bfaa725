#!/usr/bin/python3
"""mpiformer-plot: a run's curves from its --metrics files, as one PNG.

    mpiformer-plot RUN.jsonl [RUN.jsonl ...] --out curves.png [--labels A,B] [--size 1600x1000]

Panels: the training loss with the validation loss, the learning rate, the gradient norm, tok/s,
and the evaluation accuracies where the files hold any; several runs side by side, a colour each.
Reads only: each file as mpiformer-train --metrics writes it (a JSON object a line with a string
"kind" and a whole "step"; a plotted field, a number or null where it was not finite). A line that
is not such a record is an error naming the file and line, as is a file that is not a regular
file (a FIFO, a device, a directory: refused before it is opened) or not UTF-8; only a last line
cut short by a stopped run is dropped.
Writes only --out, under a temporary name renamed into place, and never over an existing file
unless --overwrite is given (a plot refreshed while a run goes on).
"""
import argparse
import json
import math
import os
import stat
import sys


class InputError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """A bad command line is one `error:` line and exit 2, as in the other programs."""

    def error(self, message):
        print(f"error: {message}; see mpiformer-plot --help", file=sys.stderr)
        sys.exit(2)


# The fields each kind's curves draw: a number, or null (the trainer's word for not finite).
PLOTTED = {"step": ("loss", "lr", "norm", "tok_s"), "val": ("loss",), "eval": ("acc", "acc_norm")}
MAX_STEP = 2**63 - 1


def read_text(path):
    """The file's text; a FIFO or a device would block or never end, so only a regular file is
    opened, and it is checked again once open (it may have been swapped in between)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError(f"{path}: not a regular file (a directory, FIFO or device); pass a "
                             "--metrics file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InputError(f"{path}: not a regular file; pass a --metrics file")
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror}); pass a --metrics file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text; pass a file mpiformer-train --metrics "
                         "wrote")


def shown(value):
    """A field's value as a message quotes it, cut short."""
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def checked_record(record, where):
    """The record with its step an int and its plotted fields floats (nan for null or not
    finite); InputError for a record mpiformer-train would not write."""
    fix = "pass a file mpiformer-train --metrics wrote"
    if not isinstance(record, dict) or "kind" not in record or "step" not in record:
        raise InputError(f"{where}: not a metrics record (no kind or step); {fix}")
    kind, step = record["kind"], record["step"]
    if not isinstance(kind, str):
        raise InputError(f"{where}: \"kind\" is {shown(kind)}, not a string; {fix}")
    # bool is an int to Python, and a float is a step only when whole (as the trainer reads it).
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise InputError(f"{where}: \"step\" is {shown(step)}, not a whole number "
                         f"from 0; {fix}")
    record = dict(record, step=step)
    for key in PLOTTED.get(kind, ()):
        value = record.get(key)
        if value is None:
            record[key] = math.nan
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: \"{key}\" is {shown(value)}, not a number or "
                             f"null; {fix}")
        else:
            try:
                record[key] = float(value)
            except OverflowError:  # an integer past a double's range
                record[key] = math.inf
    return record


def read_run(path):
    """{kind: {step: record}}: the last record of a kind and step wins."""
    lines = read_text(path).split("\n")
    run = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
            if n == len(lines):  # the last line, cut short by a run that was stopped
                break
            raise InputError(f"{path}:{n}: not JSON; pass a file mpiformer-train --metrics wrote")
        record = checked_record(record, f"{path}:{n}")
        run.setdefault(record["kind"], {})[record["step"]] = record
    if not run.get("step"):
        raise InputError(f"{path}: holds no step records; pass the --metrics file of a run that "
                         "trained at least one step")
    return run


def series(run, kind, key):
    """The points of a field where it was finite."""
    points = sorted((s, r[key]) for s, r in run.get(kind, {}).items()
                    if key in r and math.isfinite(r[key]))
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
    # A label is text: two "$" would start matplotlib's math mode, and a bad formula a traceback.
    labels = [label.replace("$", r"\$") for label in labels]
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
