"""`make bench`: build data at the stated sizes in a throw-away database, measure, print a table and write
benchmarks/results.json. Not a test: figures are printed, never asserted.

    python -m benchmarks [--quick] [--only floor,plane1,plane2,learnings,skills,broker,throttle,recall,recall_scale,
                                            scrubbing,screening,standing,capture,loop,conversations,peers,import,
                                            recall_crowd]
                         [--recall-data PATH] [--recall-limit N] [--scale-sizes 10000,100000]
                         [--loop-limit N] [--conversations-limit N] [--peer-sizes 1000,10000,100000]
                         [--import-sizes 2000,10000] [--crowd-sizes 0,100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kheish.settings")
os.environ.setdefault("SECRET_KEY", "benchmark-only-secret-key")
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("LOG_JSON", "0")
os.environ.setdefault("CELERY_BROKER_URL", "memory://")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10x smaller data, for a smoke run")
    parser.add_argument(
        "--only",
        default="floor,plane1,plane2,learnings,skills,broker,throttle,recall,recall_scale,"
        "scrubbing,screening,standing,capture,loop,conversations,peers,import,recall_crowd",
    )
    parser.add_argument(
        "--recall-data",
        default=None,
        help="LongMemEval-format .jsonl or .jsonl.gz (default ../shared/data/longmemeval/...)",
    )
    parser.add_argument("--recall-limit", type=int, default=None, help="questions to use (default all)")
    parser.add_argument(
        "--scale-sizes", default="10000,100000", help="learnings visible to one session for the recall_scale benchmark"
    )
    parser.add_argument(
        "--recall-undated",
        action="store_true",
        help="recall: publish turns without their session dates (the figure before issue 24)",
    )
    parser.add_argument("--loop-limit", type=int, default=5, help="conversations replayed by the loop benchmark")
    parser.add_argument(
        "--conversations-limit",
        type=int,
        default=None,
        help="conversations per split for the conversations benchmark (default 6; 3 with --quick)",
    )
    parser.add_argument(
        "--conversations-source",
        default="synthetic",
        choices=("synthetic", "longmemeval"),
        help="conversations: the seeded two-person generator, or the LongMemEval rewrite",
    )
    parser.add_argument(
        "--conversations-split",
        default="dev,held_out",
        help="conversations: the synthetic splits to measure (dev, held_out)",
    )
    parser.add_argument(
        "--peer-sizes",
        default="1000,10000,100000",
        help="facts per system for the peers benchmark (LangGraph, mem0, Kheish side by side)",
    )
    parser.add_argument(
        "--import-sizes",
        default="2000,10000",
        help="generated facts per import_memories run for the import benchmark (the bulk path)",
    )
    parser.add_argument(
        "--crowd-sizes",
        default="0,100000",
        help="learnings in the one project of the recall_crowd benchmark (0: every dev question's turns alone)",
    )
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    # Tasks (capture, review) are queued to an in-memory broker and not run: the figures measure the request
    # path; the learning benchmark calls the review function directly.
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.ALLOWED_HOSTS = ["*"]  # the in-process test client's host; this database is throw-away
    setup_test_environment()
    from benchmarks.harness import Results, peak_rss_mib

    results = Results()
    old_name = connection.settings_dict["NAME"]
    print(f"benchmark database engine: {connection.vendor}", flush=True)
    # A database of this run's own: two benchmark runs (or a run beside a test run) never share one.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"bench_{connection.settings_dict['NAME']}_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    started = time.perf_counter()
    try:
        scale = 10 if args.quick else 1
        wanted = set(args.only.split(","))
        # First, on the empty database: a starting worker runs the start-up repair over whatever is stored.
        if "broker" in wanted:
            from benchmarks import broker

            broker.run(results, scale=scale)
        if "floor" in wanted:
            from benchmarks import floor

            floor.run(results, scale=scale)
        if "plane1" in wanted:
            from benchmarks import plane1

            plane1.run(results, scale=scale)
        if "plane2" in wanted:
            from benchmarks import plane2

            plane2.run(results, scale=scale)
        if "learnings" in wanted:
            from benchmarks import learnings

            learnings.run(results, scale=scale)
        if "skills" in wanted:
            from benchmarks import skills

            skills.run(results, scale=scale)
        if "throttle" in wanted:
            from benchmarks import throttle

            throttle.run(results, scale=scale)
        if "recall" in wanted:
            from benchmarks import recall

            limit = args.recall_limit if args.recall_limit is not None else (10 if args.quick else None)
            recall.DATED = not args.recall_undated
            recall.run(results, data=args.recall_data, limit=limit)
        if "screening" in wanted:
            from benchmarks import screening

            screening.run(results)
        if "recall_scale" in wanted:
            from benchmarks import recall_scale

            sizes = [int(size) // scale for size in args.scale_sizes.split(",") if size.strip()]
            recall_scale.run(results, sizes=sizes)
        if "scrubbing" in wanted:
            from benchmarks import scrubbing

            scrubbing.run(results, scale=scale)
        if "standing" in wanted:
            from benchmarks import loop

            loop.run_standing(results)
        if "capture" in wanted:
            from benchmarks import loop

            loop.run_capture(results)
        if "loop" in wanted:
            from pathlib import Path

            from benchmarks import loop

            loop.run_loop(
                results,
                data=Path(args.recall_data) if args.recall_data else None,
                limit=max(1, args.loop_limit // scale),
            )
        if "conversations" in wanted:
            from benchmarks import conversations

            limit = args.conversations_limit if args.conversations_limit is not None else (3 if args.quick else None)
            conversations.run(
                results,
                data=args.recall_data,
                limit=limit,
                source=args.conversations_source,
                splits=tuple(s.strip() for s in args.conversations_split.split(",") if s.strip()),
            )
        if "peers" in wanted:
            from benchmarks import peers

            peers.run(results, sizes=[int(size) // scale for size in args.peer_sizes.split(",") if size.strip()])
        if "recall_crowd" in wanted:
            from benchmarks import recall_crowd

            recall_crowd.run(
                results,
                sizes=[int(size) // scale for size in args.crowd_sizes.split(",") if size.strip()],
                data=args.recall_data,
                limit=args.recall_limit if args.recall_limit is not None else (10 if args.quick else None),
            )
        if "import" in wanted:
            from benchmarks import imports

            imports.run(results, sizes=[int(size) // scale for size in args.import_sizes.split(",") if size.strip()])
        results.add("bench.peak_rss", peak_rss_mib(), "MiB", "whole run")
        results.add("bench.wall_time", time.perf_counter() - started, "s", "whole run")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    print()
    print(results.table())
    from benchmarks.harness import RESULTS_PATH

    # Smoke runs (--quick) never overwrite the recorded full-size figures.
    path = RESULTS_PATH.with_name("results.local.json") if args.quick else RESULTS_PATH
    results.write(path)
    print(f"\nwritten to {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
