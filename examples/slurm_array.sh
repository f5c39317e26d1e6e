#!/usr/bin/env bash
# A Slurm job array that tunes one workload on several nodes at once: each array task
# runs a search of its own seed, and every task writes its trials into one study kept
# in PostgreSQL (docs/storage.md). A task's finalists are chosen from the trials of all.
#
#   export AUTOTUNE_STUDY_URL=postgresql://USER:PASSWORD@HOST/DATABASE
#   job=$(sbatch --parsable examples/slurm_array.sh)             # 4 tasks, seeds 0-3
#   CONFIG=train.py TRIALS=24 sbatch examples/slurm_array.sh     # your config
#   sbatch --dependency=afterany:"$job" --wrap 'autotune show "$AUTOTUNE_STUDY_URL"'
#
# Submit it from the folder your config's path is relative to, with autotune's virtual
# environment active: sbatch hands the job your environment (--export=ALL, its default).
# The tasks must land on nodes of one kind (one partition, or a --constraint): a study
# keeps figures of one machine, and a task on other CPUs, GPUs or RAM is refused.
#
# Without Slurm the same body runs on one machine, one task per call:
#   AUTOTUNE_STUDY_URL=... SLURM_ARRAY_TASK_ID=1 bash examples/slurm_array.sh
# AUTOTUNE_FLAGS adds search flags: AUTOTUNE_FLAGS="--window-seconds 1.0 --study-name a".
#
#SBATCH --job-name=autotune
#SBATCH --array=0-3
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=01:00:00
#SBATCH --output=autotune-%A_%a.out
# --exclusive: a whole node for each task, so that nothing else running there moves its
# figures; without it, give each task the CPUs a training run there would have
# (--cpus-per-task) and the study is tuned for that share.

set -euo pipefail

: "${AUTOTUNE_STUDY_URL:?set it to the study database, as postgresql://USER:PASSWORD@HOST/DATABASE}"
CONFIG="${CONFIG:-examples/quickstart.py}"
TRIALS="${TRIALS:-12}"
TASK="${SLURM_ARRAY_TASK_ID:-0}"
read -r -a flags <<<"${AUTOTUNE_FLAGS:-}"

cd "${SLURM_SUBMIT_DIR:-.}"
echo "task ${TASK} of job ${SLURM_ARRAY_JOB_ID:-local} on $(hostname): ${CONFIG}, ${TRIALS} trials" >&2
autotune search "$CONFIG" --study "$AUTOTUNE_STUDY_URL" --trials "$TRIALS" --seed "$TASK" \
    ${flags[@]+"${flags[@]}"}
# Once every task has ended (the --dependency job above): the study's answer, every trial.
#   autotune show "$AUTOTUNE_STUDY_URL" --study-name "$(basename "$CONFIG" .py)"
