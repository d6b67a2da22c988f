"""Build the held-out certification set of programs/airline-smollm2-135m.json and record what it saw.

The program was induced on `--sample-tasks 12 --seed 0` of tau-bench's gpt-4o airline run (split 6/2/4
by task). This script re-derives that sample and split, checks that their fingerprint equals the
manifest's `data_fingerprint` (so the reconstruction is exact), writes the train+val ids and tasks into
the manifest (`data_seen`), and writes held_out.jsonl: the 4 test-split items (never trained or selected
on) plus trial 0 of 12 seeded-random tasks outside the 12 sampled ones, 8 passed and 8 failed in all.
"""

import json
import sys
from pathlib import Path

import numpy as np

from rubricforge_dspy.data.formats import load_trajectories
from rubricforge_dspy.data.formats.jsonl import to_record
from rubricforge_dspy.data.split import sample_by_task, split_by_task
from rubricforge_dspy.evidence.render import RenderConfig, render_trajectory
from rubricforge_dspy.program.store import data_fingerprint, data_ids, read_program, update_manifest

PROGRAM = Path("programs/airline-smollm2-135m.json")
SOURCE = "evals/data/tau_bench_official/gpt-4o-airline.json"
OUT = Path(__file__).with_name("held_out.jsonl")

trajectories = load_trajectories([SOURCE])
split = split_by_task(sample_by_task(trajectories, 12, 0), seed=0)
manifest = read_program(PROGRAM)["rubricforge"]
seen = [*split.train, *split.val]
if data_fingerprint(seen) != manifest["data_fingerprint"]:
    sys.exit("the reconstructed train+val split does not match the manifest's data_fingerprint")
update_manifest(PROGRAM, {"data_seen": data_ids(seen)})

sampled_tasks = {t.task_id for t in [*seen, *split.test]}
unseen = sorted((t for t in trajectories if t.task_id not in sampled_tasks and t.trial == 0),
                key=lambda t: int(t.task_id))
rng = np.random.default_rng(11)
positives = [t for t in unseen if t.label]
negatives = [t for t in unseen if not t.label]
need_pos = 8 - sum(t.label for t in split.test)
need_neg = 8 - sum(1 - t.label for t in split.test)
chosen = [positives[i] for i in sorted(rng.choice(len(positives), need_pos, replace=False))] + \
         [negatives[i] for i in sorted(rng.choice(len(negatives), need_neg, replace=False))]
held_out = [*split.test, *chosen]
config = RenderConfig(**manifest["render"])
with OUT.open("w") as handle:
    for t in held_out:
        handle.write(json.dumps(to_record(t, reward=t.reward, label=t.label)) + "\n")
back = load_trajectories([str(OUT)])
assert [render_trajectory(t, config) for t in back] == [render_trajectory(t, config) for t in held_out], \
    "the JSONL copy renders differently from the source"
print(f"{len(held_out)} held-out items ({sum(t.label for t in held_out)} passed) from tasks "
      f"{sorted({t.task_id for t in held_out}, key=int)} -> {OUT}")
