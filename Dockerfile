# Production image for Lakeshare. Build: docker build -t lakeshare .
# Optional extras: --build-arg LAKESHARE_EXTRAS=azure-identity (Entra ID credentials for
# Azure, e.g. Azure workload identity in Kubernetes).
# Run:   docker run -p 8080:8080 -v $PWD/config.yaml:/config/config.yaml:ro lakeshare
# The configuration (YAML, see config.example.yaml) is mounted at /config/config.yaml;
# secrets are best passed as environment variables referenced from it (${VAR}).

FROM python:3.11-slim AS build
ARG LAKESHARE_EXTRAS=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY sharing ./sharing
COPY deltalog ./deltalog
# Wheels for Lakeshare and all its dependencies (and those of the extras asked for), so
# the runtime stage needs no compiler and keeps no build cache.
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".${LAKESHARE_EXTRAS:+[$LAKESHARE_EXTRAS]}"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 lakeshare \
    && useradd --system --uid 10001 --gid lakeshare --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin lakeshare
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
# Where a writable volume keeps the state store (see deploy/docker-compose.yml): a named
# volume mounted here starts with this directory's owner, the lakeshare user.
RUN install -d -o 10001 -g 10001 -m 0750 /var/lib/lakeshare
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["lakeshare"]
CMD ["serve", "--config", "/config/config.yaml"]
