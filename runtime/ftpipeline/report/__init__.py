"""The run report: a page to look at a run (its graph, its steps over time, its recoveries) in a browser.

``Timeline`` records the coordinator's events (``timeline.py``), ``Fanout``
gives them to it next to the terminal's observer (``fanout.py``),
``write_report`` writes ``report.html`` (``render.py``) and ``serve`` shows
the same page live during a run (``serve.py``).
"""

from ftpipeline.report.fanout import Fanout
from ftpipeline.report.render import write_report
from ftpipeline.report.serve import LiveServer, serve
from ftpipeline.report.timeline import Timeline

__all__ = ["Fanout", "LiveServer", "Timeline", "serve", "write_report"]
