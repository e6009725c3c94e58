# Reads the TensorBoard event files of a primus run directory with the official `tensorboard` package
# (EventAccumulator) and checks every scalar against the run's metrics.jsonl: the same step, and the value
# equal to the JSON number rounded to float32 (TensorBoard's simple_value). A second, independent reader
# (pure Python: TFRecord framing, both masked CRC32Cs, the protobuf fields) checks the same files, so that
# the framing is verified even where the package is missing.
# usage: python3 tensorboard_check.py RUN_DIR [TB_DIR]   exit 0 ok, 1 mismatch, 4 tensorboard package missing
import glob, json, math, os, struct, sys

run_dir = sys.argv[1]
tb_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(run_dir, "tensorboard")
files = sorted(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
if not files:
    print(f"no event files in {tb_dir}")
    sys.exit(1)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# --- the independent reader -------------------------------------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        tag, i = varint(b, i)
        num, wire = tag >> 3, tag & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i : i + 8], i + 8
        elif wire == 5:
            v, i = b[i : i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i : i + n], i + n
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, v


def own_read(path):
    data = open(path, "rb").read()
    pos, out, version = 0, {}, None
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        assert struct.unpack_from("<I", data, pos + 8)[0] == masked(data[pos : pos + 8]), f"{path}@{pos}: len CRC"
        if pos + 16 + n > len(data):
            break  # torn tail
        body = data[pos + 12 : pos + 12 + n]
        assert struct.unpack_from("<I", data, pos + 12 + n)[0] == masked(body), f"{path}@{pos}: data CRC"
        step = 0
        values = []
        for num, wire, v in fields(body):
            if num == 2:
                step = v
            elif num == 3:
                version = v.decode()
            elif num == 5:
                for _, _, val in fields(v):
                    tag = value = None
                    for vn, _, vv in fields(val):
                        if vn == 1:
                            tag = vv.decode()
                        elif vn == 2:
                            value = struct.unpack("<f", vv)[0]
                    values.append((tag, value))
        for tag, value in values:
            out.setdefault(tag, []).append((step, value))
        pos += 16 + n
    return version, out


own = {}
for p in files:
    version, scalars = own_read(p)
    if version != "brain.Event:2":
        print(f"{p}: first record's file_version is {version!r}, expected 'brain.Event:2'")
        sys.exit(1)
    for tag, pts in scalars.items():
        own.setdefault(tag, []).extend(pts)
print(f"own reader: {len(files)} file(s), {len(own)} tags, both CRCs of every record ok")

# --- the official package ---------------------------------------------------------------------------------
official = None
try:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    official = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    import tensorboard

    print(f"tensorboard {tensorboard.__version__}: {len(official)} scalar tags")
except ImportError as e:
    print(f"the tensorboard package is missing ({e}): checked with the own reader only")

scalars = official if official is not None else own
for tag in sorted(scalars):
    pts = scalars[tag]
    print(f"  {tag:<34} {len(pts):>4} points  first {pts[0]}  last {pts[-1]}")

# --- against metrics.jsonl ------------------------------------------------------------------------------
text = open(os.path.join(run_dir, "metrics.jsonl")).read()
recs = [json.loads(l) for l in text[: text.rfind("\n") + 1].splitlines() if l.strip()]
steps = [r for r in recs if "loss" in r]
vals = [r for r in recs if "val_loss" in r]
expect = {"lm loss": [(r["step"], r["loss"]) for r in steps],
          "grad-norm": [(r["step"], r["grad_norm"]) for r in steps],
          "learning-rate": [(r["step"], r["lr"]) for r in steps],
          "lm loss vs samples": [(r["consumed_samples"], r["loss"]) for r in steps],
          "iteration-time": [(r["step"], r["iter_ms"] / 1e3) for r in steps],
          "throughput": [(r["step"], r["tflops_gpu"]) for r in steps],
          "tokens-per-sec-per-gpu": [(r["step"], r["tok_s_gpu"]) for r in steps],
          "mem-max-allocated-bytes": [(r["step"], r["mem_gb"] * 1e9) for r in steps],
          "lm loss validation": [(r["step"], r["val_loss"]) for r in vals],
          "lm loss validation ppl": [(r["step"], math.exp(min(20.0, r["val_loss"]))) for r in vals]}
if any("mfu" in r for r in steps):
    expect["mfu"] = [(r["step"], r["mfu"]) for r in steps]
bad = 0
for tag, want in expect.items():
    for name, got_all in (("tensorboard", official), ("own reader", own)):
        if got_all is None:
            continue
        got = dict(got_all.get(tag, []))
        if not want:
            continue
        miss = [(s, v) for s, v in want if s not in got or got[s] != f32(v)]
        if miss:
            bad += 1
            s, v = miss[0]
            print(f"MISMATCH {name} {tag}: {len(miss)} of {len(want)} points differ, e.g. step {s}: "
                  f"metrics.jsonl {v} (f32 {f32(v)}) vs event file {got.get(s)}")
        else:
            print(f"ok {name:<11} {tag:<28} {len(want)} points equal metrics.jsonl (as float32)")
if bad:
    sys.exit(1)
sys.exit(0 if official is not None else 4)
