# One image for the operator and the workers: a JRE, Python, PySpark and ftpipeline.
# BASE can point at a locally built Debian bookworm image with Python 3.11.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin ftpipeline
WORKDIR /opt/ftpipeline
COPY pyproject.toml README.md ./
COPY runtime runtime
COPY operator operator
RUN pip install --no-cache-dir . && rm -rf /root/.cache
COPY examples examples

ENV PYTHONUNBUFFERED=1
USER 10001
ENTRYPOINT ["ftpipeline"]
CMD ["--help"]
