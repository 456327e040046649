import statistics
import time

from learnings.models import Learning
from skills.models import LearningSkill
from skills.fingerprint import SkillDefinition, SkillRuntime
from tests.skills.conftest import write_catalog_skill


def test_bench(db, api_client, session_id, catalog_dir):
    for i in range(1000):
        write_catalog_skill(catalog_dir, f"cat-{i:04d}", f"---\nname: cat-{i:04d}\ndescription: Catalog skill {i}.\nwhen_to_use: When {i}.\n---\nDo {i}.\n")
    learnings = Learning.objects.bulk_create([Learning(scope_kind="workspace", scope_id="default", scope_key="workspace:default", kind="procedure", content=f"proc {i}", status="active", publish_tier="active") for i in range(1000)])
    runtime = SkillRuntime(context="fork", agent_profile="verification")
    rows = []
    for i, l in enumerate(learnings):
        d = SkillDefinition(name=f"promoted-{i:04d}", description=f"Promoted {i}.", instructions=f"Step {i}.", runtime=runtime)
        rows.append(LearningSkill(skill_name=d.name, source_learning=l, source_scope={"kind": "workspace", "id": "default"}, status="active", description=d.description, instructions=d.instructions, runtime=runtime.to_dict(), definition_fingerprint=d.fingerprint(), verification_status="verified", real_daemon_verified=True, successful_run_count=2, canary_success_count=1, verifier_run_ids=["run-1"]))
    LearningSkill.objects.bulk_create(rows)
    import cProfile, pstats
    api_client.get("/v1/skills", {"limit": 500})
    pr = cProfile.Profile(); pr.enable()
    for _ in range(5):
        api_client.get("/v1/skills", {"limit": 500})
    pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(15)
    for url, params in (("/v1/skills", {"limit": 500}), (f"/v1/sessions/{session_id}/skills", {"limit": 500}), ("/v1/skills", {"query": "promoted-09", "limit": 50})):
        t0 = time.perf_counter(); r = api_client.get(url, params); first = time.perf_counter() - t0
        assert r.status_code == 200 and r.json()["count"] >= 100 or "query" in params
        times = []
        for _ in range(30):
            t0 = time.perf_counter(); api_client.get(url, params); times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        print(url, params, r.json()["count"], f"first={first*1000:.0f}ms p50={statistics.median(times):.1f}ms p95={times[int(len(times)*0.95)-1]:.1f}ms")
