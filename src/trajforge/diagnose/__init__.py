"""Error-to-training (AET): localize the decisive error of a failed run, diagnose it, propose
a correction, verify it, and (with `trajforge.generate.views`) emit training views.

See README.md in this folder for the definition of the decisive error and the taxonomy.
"""

from trajforge.diagnose.localize import LOCALIZERS, HeuristicLocalizer, Localizer
from trajforge.diagnose.model import Correction, Diagnosis, Evidence, Verification
from trajforge.diagnose.run import diagnose_run, diagnose_runs, diagnose_store, select_failures
from trajforge.diagnose.storage import load_diagnoses, save_diagnoses
from trajforge.diagnose.taxonomy import CATEGORIES

__all__ = [
    "CATEGORIES",
    "LOCALIZERS",
    "Correction",
    "Diagnosis",
    "Evidence",
    "HeuristicLocalizer",
    "Localizer",
    "Verification",
    "diagnose_run",
    "diagnose_runs",
    "diagnose_store",
    "load_diagnoses",
    "save_diagnoses",
    "select_failures",
]
