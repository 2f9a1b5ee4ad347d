"""one_line: what a condition, an Event or a task failure says; the traceback stays in the logs."""

from __future__ import annotations

import traceback

from ftpipeline.obs.errors import one_line


def test_an_os_error_names_the_errno_and_the_path() -> None:
    try:
        open("/proc/nonexistent/out", "w")
    except OSError as exc:
        assert one_line(exc) == "FileNotFoundError: [Errno 2 ENOENT] No such file or directory: '/proc/nonexistent/out'"


def test_a_multi_line_message_keeps_its_first_line() -> None:
    exc = RuntimeError("[UNRESOLVED_COLUMN] A column `usr` cannot be resolved.\n  JVM stacktrace:\n  at org.apache...")
    assert one_line(exc) == "RuntimeError: [UNRESOLVED_COLUMN] A column `usr` cannot be resolved."


def test_a_traceback_passed_as_text_keeps_its_last_line() -> None:
    try:
        {}["missing"]
    except KeyError:
        text = traceback.format_exc()
    assert "\n" in text
    assert one_line(text) == "KeyError: 'missing'"


def test_long_messages_are_cut() -> None:
    out = one_line(ValueError("x" * 1000), limit=50)
    assert len(out) == 50 and out.endswith("…") and "\n" not in out


class Py4JJavaError(Exception):
    """py4j's error's shape: the call on its first line, the JVM's exception after a ': ' line."""

    def __str__(self) -> str:
        return ("An error occurred while calling o123.getResult.\n"
                ": org.apache.spark.SparkException: Job aborted: results bigger than spark.driver.maxResultSize\n"
                "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n")


class Py4JJavaErrorWrapped(Py4JJavaError):
    def __str__(self) -> str:
        return ("An error occurred while calling o123.getResult.\n"
                ": org.apache.spark.SparkException: Exception thrown in awaitResult:\n"
                "\tat org.apache.spark.util.SparkThreadUtils.awaitResult(SparkThreadUtils.scala:53)\n"
                "Caused by: org.apache.spark.SparkException: Job aborted: results bigger than spark.driver.maxResultSize\n"
                "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n")


def test_a_jvm_error_names_the_jvm_exception_not_only_the_call() -> None:
    assert one_line(Py4JJavaError()) == ("Py4JJavaError: An error occurred while calling o123.getResult. "
                                         "org.apache.spark.SparkException: Job aborted: results bigger than "
                                         "spark.driver.maxResultSize")
    Py4JJavaErrorWrapped.__name__ = "Py4JJavaError"
    assert one_line(Py4JJavaErrorWrapped()) == one_line(Py4JJavaError()), "a wrapper's deepest cause"
