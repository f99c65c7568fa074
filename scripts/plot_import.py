"""Plots import cost per call against tensor size from the exchange bench's CSV."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

source, target = sys.argv[1], sys.argv[2]
with open(source) as f:
    rows = list(csv.DictReader(f))
sizes = [int(r["bytes"]) for r in rows]
series = [
    ("numpy_ns", "np.from_dlpack(a)"),
    ("ours_ns", "RsDLPack import + release"),
    ("ours_dl_device_ns", "RsDLPack, dl_device=(CPU, 0)"),
    ("floor_ns", "floor: a.__dlpack__(max_version=(1, 3)) + drop"),
]
fig, ax = plt.subplots(figsize=(7, 4))
for key, label in series:
    ax.plot(sizes, [float(r[key]) for r in rows], marker="o", label=label)
ax.set_xscale("log", base=2)
ax.set_ylim(bottom=0)
ax.set_xlabel("tensor size (bytes, float32)")
ax.set_ylabel("ns per call (median)")
ax.set_title("Importing a NumPy array: cost per call vs size")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
fig.tight_layout()
fig.savefig(target, dpi=100)
print(f"plot written to {target}")
