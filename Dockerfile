# The Herald image: one image for the worker, the API and one-shot commands (`herald migrate`).
# Built by docker-compose.yml; the command picks the role.
#
# Reproducible: the dependencies come from requirements.lock (every version pinned, every
# file's hash checked; `make lock` writes it), then Herald itself without resolving
# anything. Only the runtime packages are copied: no dev stack, simulators, bench or
# scenarios, and none of the `dev-stack` extra (the embedded Postgres and Temporal
# binaries); `herald dev` here says so in one line. .dockerignore admits nothing else into the build context.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HERALD_DATA_DIR=/var/lib/herald

WORKDIR /app
# Its own layer: a change to Herald's code does not reinstall the dependencies. The build
# backend first, from its own lock, so that building the one sdist-only dependency (dkimpy)
# and Herald itself fetches nothing unpinned into an isolated build environment.
COPY requirements-build.lock requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements-build.lock \
    && pip install --require-hashes --no-deps --no-build-isolation -r requirements.lock

COPY pyproject.toml README.md settings.py worker.py ./
COPY domain ./domain
COPY workflows ./workflows
COPY activities ./activities
COPY starter ./starter
COPY cli ./cli
COPY runtime ./runtime
COPY ledger ./ledger
COPY transports ./transports
COPY api ./api
COPY policies ./policies
COPY templates ./templates
# Built with the locked setuptools installed above: nothing is fetched here.
RUN pip install --no-deps --no-build-isolation . \
    && useradd --system --create-home --home-dir /var/lib/herald herald \
    && mkdir -p /var/lib/herald/artifacts \
    && chown -R herald /var/lib/herald

# Never root: the data folder is the only place the process writes.
USER herald
CMD ["herald", "worker"]
