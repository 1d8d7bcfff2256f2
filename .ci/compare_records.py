"""Compare what two fresh-check runs (.ci/fresh-check) wrote, wherever speclens claims equality.

- Every run dir both test suites wrote (the same path under each --basetemp): where both ran
  with reproducible numerics (float32, or batch-invariant kernels; summary.json `numerics`), every
  turn's output tokens and accepted counts must be equal; elsewhere (bf16) the AL difference is
  shown, not judged.
- Every drafter speclens built and every answers file it generated, in both caches: the same bytes.
Prints one line per finding and a last line `N equal, M differ`; exits 1 when anything claimed
equal differs. Usage: python .ci/compare_records.py <fresh-check mode dir A> <mode dir B>
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

# Run by the fresh clone's venv, where speclens is installed: the self-check's own comparison.
from evals.selfcheck import parted


def reproducible(summary: dict) -> bool:
    numerics = summary.get("numerics") or {}
    return bool(numerics.get("reproducible"))


def readable(path: Path) -> dict | None:
    """The summary's JSON, or None where the suite left it corrupt (the fault tests write such)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compare_runs(a: Path, b: Path) -> tuple[int, int]:
    equal = differ = 0
    for summary_a in sorted((a / "pytest").rglob("summary.json")):
        rel = summary_a.parent.relative_to(a / "pytest")
        summary_b = b / "pytest" / rel / "summary.json"
        if not summary_b.is_file() or not (summary_a.parent / "outputs.jsonl").is_file():
            continue
        sa, sb = readable(summary_a), readable(summary_b)
        if sa is None or sb is None:
            print(f"skipped {rel}: a summary.json a test left unreadable on purpose")
            continue
        if reproducible(sa) and reproducible(sb):
            same = not parted(summary_a.parent, summary_b.parent)[1] and sa.get("al") == sb.get("al")
            equal, differ = equal + same, differ + (not same)
            if not same:
                print(f"DIFFER  {rel}: AL {sa.get('al')} vs {sb.get('al')} ({sa['numerics']['dtype']}, claimed equal)")
        elif isinstance(sa.get("al"), float) and isinstance(sb.get("al"), float):
            print(
                f"moved   {rel}: AL {sa['al']:.4f} vs {sb['al']:.4f} "
                f"({(sa.get('numerics') or {}).get('dtype')}: not claimed equal)"
            )
    return equal, differ


def compare_builds(a: Path, b: Path) -> tuple[int, int]:
    equal = differ = 0
    files = [*(a / "cache" / "models").glob("*/model.safetensors"), *(a / "cache" / "drafter-data").glob("*.jsonl")]
    for file_a in sorted(files):
        rel = file_a.relative_to(a / "cache")
        file_b = b / "cache" / rel
        if not file_b.is_file():
            continue
        digest_a, digest_b = digest(file_a), digest(file_b)
        same = digest_a == digest_b
        equal, differ = equal + same, differ + (not same)
        print(
            f"{'equal  ' if same else 'DIFFER '} {rel}: sha256 {digest_a[:16]}"
            + ("" if same else f" vs {digest_b[:16]}")
        )
    return equal, differ


def main(argv: list[str]) -> int:
    a, b = Path(argv[0]), Path(argv[1])
    runs = compare_runs(a, b)
    builds = compare_builds(a, b)
    equal, differ = runs[0] + builds[0], runs[1] + builds[1]
    print(f"compare: {runs[0]} float32 runs and {builds[0]} built files equal; {differ} differ")
    print(f"{equal} equal, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
