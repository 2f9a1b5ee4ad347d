"""The admission webhook as a process of its own, beside the operator in its pod.

    kopf run --standalone --all-namespaces -m ftpipeline_operator.webhook

Why not in the operator's process: the operator runs a coordinator for every
running pipeline on its threads, and on a busy node (ten pipelines' Spark
JVMs on two cores) a review waited for the interpreter behind them until
the API server's ``timeoutSeconds`` passed and ``kubectl apply`` failed. A
process of its own has its own interpreter and its own share of the CPU
(the chart's ``webhook.resources``); it watches no object (Kopf still
follows the CRDs, so a CRD installed after it starts is served) and needs
no peering: every replica's webhook answers, whichever operator is active.
What it checks and how its certificate is shared is ``admission.py``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf
from kubernetes import config

from ftpipeline.spec.schema import API_GROUP, API_VERSION, PLURAL
from ftpipeline_operator import admission


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    logging.getLogger("ftpipeline").setLevel(os.environ.get("FTPIPELINE_LOG_LEVEL", "INFO"))
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    admission.configure(settings)


kopf.on.validate(API_GROUP, API_VERSION, PLURAL, id=admission.WEBHOOK_ID,
                 operations=["CREATE", "UPDATE"])(admission.validate)
