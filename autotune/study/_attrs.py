"""The names autotune gives its attributes in an Optuna study (all JSON user attributes):

study attributes
    ``autotune``         format, machine and workload fingerprints, space, options
    ``autotune.result``  the chosen settings with the figures that chose them
    ``autotune.starts``  where each search of the study started
trial attributes
    ``autotune.role``      explore, baseline, confirm
    ``autotune.settings``  the whole config the trial measured
    ``autotune.figures``   its figures (windows included)
    ``autotune.failure``   why it failed
    ``autotune.backend``   who ran it: optuna (in the search's process) or ray
    ``autotune.node``      with ray: the node it ran on (hostname, Ray node id)
    ``autotune.owner``     the search process running it (host, pid, start time)
"""

from __future__ import annotations

STUDY_FORMAT = 1
META = "autotune"
RESULT = "autotune.result"
ROLE = "autotune.role"
SETTINGS = "autotune.settings"
FIGURES = "autotune.figures"
FAILURE = "autotune.failure"
GROUP = "autotune.group"
POSITION = "autotune.position"
"""Trial attribute: where a confirming trial stands in its round's list of configs."""
BACKEND = "autotune.backend"
NODE = "autotune.node"
DUPLICATE_OF = "autotune.duplicate_of"
BOUNDED = "autotune.bounded"
OWNER = "autotune.owner"
PROPOSED_BY = "autotune.proposed_by"
"""Trial attribute: why autotune queued this config rather than the sampler proposing it."""
STARTS = "autotune.starts"
"""Study attribute: where each search of the study started, one entry a search, oldest first."""
WARM_START = "warm start"
"""The PROPOSED_BY of the configs a search tries first (judged from ASHA's second rung)."""
