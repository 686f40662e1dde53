# Production image for Lakeshare. Build: docker build -t lakeshare .
# Optional extras: --build-arg LAKESHARE_EXTRAS=azure-identity (Entra ID credentials for
# Azure, e.g. Azure workload identity in Kubernetes).
# Run:   docker run -p 8080:8080 -v $PWD/config.yaml:/config/config.yaml:ro lakeshare
# The configuration (YAML, see config.example.yaml) is mounted at /config/config.yaml;
# secrets are best passed as environment variables referenced from it (${VAR}).
#
# The refresher (`lakeshare views refresh --watch`: compatible copies and views on Spark)
# is a second image from this file, with the `spark` extra (PySpark and its Spark Connect
# client) and a Java runtime for embedded Spark (views.spark.master local[*]):
#   docker build --target refresher -t lakeshare-refresher .
# Only the stages a target needs are built: the server image carries no PySpark or Java.

FROM python:3.11-slim AS build
ARG LAKESHARE_EXTRAS=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY sharing ./sharing
COPY deltalog ./deltalog
COPY client ./client
COPY pipeline ./pipeline
# Wheels for Lakeshare and all its dependencies (and those of the extras asked for), so
# the runtime stage needs no compiler and keeps no build cache.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".${LAKESHARE_EXTRAS:+[$LAKESHARE_EXTRAS]}"

FROM build AS build-spark
# The same, with the spark extra added to the ones asked for.
RUN pip wheel --no-cache-dir --wheel-dir /wheels-spark ".[spark${LAKESHARE_EXTRAS:+,$LAKESHARE_EXTRAS}]"

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 lakeshare \
    && useradd --system --uid 10001 --gid lakeshare --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin lakeshare
# Where a writable volume keeps the state store (see deploy/docker-compose.yml): a named
# volume mounted here starts with this directory's owner, the lakeshare user.
RUN install -d -o 10001 -g 10001 -m 0750 /var/lib/lakeshare

FROM base AS refresher
# Java 17 for Spark embedded in the refresher (not needed over Spark Connect, kept so one
# image serves both settings). Unpinned: Debian's security updates replace the version.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build-spark,source=/wheels-spark,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
# Spark finds `java` on the PATH; embedded Spark talks to itself on the loopback.
ENV SPARK_LOCAL_IP=127.0.0.1
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["lakeshare"]
CMD ["views", "refresh", "--watch", "--config", "/config/config.yaml"]

FROM base AS server
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["lakeshare"]
CMD ["serve", "--config", "/config/config.yaml"]
