"""The published figures the simulator is compared with (never used to fit anything).

From section V of *A Coprocessor Sharing-Aware Scheduler for Xeon Phi-based Compute Clusters*
(Coviello et al.): Table II (Table I set, 1000 jobs, 8 nodes), Table III (footprint per
synthetic distribution, 400 jobs) and the text on Fig. 10 (200 jobs per node, normal
distribution). The paper's names map to coshare's policies: MC = exclusive, MCC = random,
MCCK = knapsack. Pure: constants only.
"""

from __future__ import annotations

#: Paper configuration names by coshare policy.
PAPER_NAMES = {"exclusive": "MC", "random": "MCC", "knapsack": "MCCK"}

#: Table II: makespan (s) on the 8-node cluster.
TABLE_II_MAKESPAN_S = {"exclusive": 3568.0, "random": 2611.0, "knapsack": 2183.0}
#: Table II: makespan reduction against MC.
TABLE_II_REDUCTION = {"exclusive": 0.0, "random": 0.27, "knapsack": 0.39}
#: Table II: footprint (nodes to match MC's makespan on 8 nodes).
TABLE_II_FOOTPRINT = {"exclusive": 8, "random": 6, "knapsack": 5}

#: Table III: footprint per synthetic distribution.
TABLE_III_FOOTPRINT = {
    "uniform": {"exclusive": 8, "random": 6, "knapsack": 5},
    "normal": {"exclusive": 8, "random": 6, "knapsack": 5},
    "low-skew": {"exclusive": 8, "random": 4, "knapsack": 3},
    "high-skew": {"exclusive": 8, "random": 6, "knapsack": 6},
}

#: Section III: MC's device core utilization measured on the synthetic sets (a range).
SYNTHETIC_MC_UTILIZATION = (0.38, 0.63)

#: Fig. 10 (text): at the largest cluster, MCCK's makespan reduction against MCC and MC.
FIG_10_REDUCTION = {"random": 0.11, "exclusive": 0.40}
