"""HTCondor's own tools as the guides show them, on the real pool: a user submits with
``condor_submit``; coshare holds a job whose annotation is unusable and ``condor_q -hold`` says
why; the user fixes it with ``condor_qedit`` and lets it go with ``condor_release``; the next
cycle places it and ``condor_reschedule`` asks for a negotiation; ``condor_vacate_job -fast``
(what coshare runs to give a trial's or a lender's cores back) sends the running job back to
the queue; ``condor_reconfig`` (after installing or removing a configuration snippet) reloads
the pool."""

from __future__ import annotations

import re

from tests.integration.condor_pool import CHROOT, WORK, Pool, pool, wait_for

#: The user guide's annotated submit file, with the unusable value it shows.
SUBMIT = f"""executable            = {WORK}/job.sh
arguments             = 120
initialdir            = {WORK}
request_memory        = 64
+CoshareDeviceMemory  = "lots"
+CoshareDeviceThreads = 60
queue 1
"""


def test_htcondors_own_tools_as_the_guides_show_them(live: Pool) -> None:
    (CHROOT / "tmp" / "guide.sub").write_text(SUBMIT)
    submitted = pool("exec", "condor_submit", "/tmp/guide.sub")
    found = re.search(r"1 job\(s\) submitted to cluster (\d+)\.", submitted)
    assert found, submitted
    job = f"{found[1]}.0"

    report = live.cycle()
    assert job in {r.job for r in report.rejected}
    held = pool("exec", "condor_q", "-hold", "-af", "HoldReason", job)
    assert (
        "coshare: CoshareDeviceMemory='lots' is not a number (allowed: integer MiB >= 1, or "
        "with a unit (2G), at most 16384)"
    ) in held, held

    edited = pool("exec", "condor_qedit", job, "CoshareDeviceMemory", '"2G"')
    assert 'Set attribute "CoshareDeviceMemory" for 1 matching jobs.' in edited, edited
    released = pool("exec", "condor_release", job)
    assert f"Job {job} released" in released, released

    report = live.cycle()
    assert job in {a.job for a in report.plan.assignments}, report
    rescheduled = pool("exec", "condor_reschedule")
    assert 'Sent "Reschedule" command' in rescheduled, rescheduled
    wait_for(lambda: live.jobs()[job]["JobStatus"] == 2, 120, "the released job to run")

    vacated = pool("exec", "condor_vacate_job", "-fast", job)
    assert f"Job {job} fast-vacated" in vacated, vacated
    wait_for(lambda: live.jobs()[job]["JobStatus"] == 1, 120, "the vacated job to be idle")

    reconfigured = pool("exec", "condor_reconfig")
    assert 'Sent "Reconfig" command' in reconfigured, reconfigured
