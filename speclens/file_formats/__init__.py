"""The files speclens writes and reads back, each format defined once with its reader and writer.

- `summary_file`: summary.json and replay.json (their record types: `speclens/figures/summary.py`),
  the one reader and its migrations;
- `run_files`: a run dir's files, named once; the stamp and outputs' readers; a failed sweep job's
  failure.json;
- `records`: the per-step and per-request records as versioned parquet;
- `reading`: the public reader over run and sweep dirs (`speclens.read_run`, `speclens.read_sweep`);
- `profile_file`: speculation_profile.json (speclens's layout and Model-Optimizer's);
- `curves_file`: curves.parquet and curves.csv, the AL-vs-D curves;
- `serve_file`: serve.json, what to deploy; `schedule_file`: a draft-length schedule, from its own
  file or a serve.json; `whatif_file`: whatif.json, the GPU predictions;
- `drafter_build`: speclens_drafter.json, how a drafter speclens built was trained;
- `peer_exports`: the export files of other benchmark tools, read for `reports.explain`;
- `schemas`: each format's JSON Schema, generated from its record types into docs/schemas/.

Every format's types, ranges and required fields are declared once, as record types checked by one
schema library (speclens/schema.py, pydantic): a damaged or foreign file is refused in one line
naming the file, the field and the rule.

Commands and reports read and write these files through these modules only.
"""
