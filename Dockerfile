# The Herald image: one image for the worker, the API and one-shot commands (`herald migrate`).
# Built by docker-compose.yml; the command picks the role.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HERALD_DATA_DIR=/var/lib/herald

WORKDIR /app
COPY pyproject.toml README.md settings.py worker.py ./
COPY domain ./domain
COPY workflows ./workflows
COPY activities ./activities
COPY starter ./starter
COPY cli ./cli
COPY runtime ./runtime
COPY devstack ./devstack
COPY scenarios ./scenarios
COPY bench ./bench
COPY ledger ./ledger
COPY transports ./transports
COPY api ./api
COPY policies ./policies
COPY templates ./templates
RUN pip install . \
    && useradd --system --create-home --home-dir /var/lib/herald herald \
    && mkdir -p /var/lib/herald/artifacts \
    && chown -R herald /var/lib/herald

# Never root: the data folder is the only place the process writes.
USER herald
CMD ["herald", "worker"]
