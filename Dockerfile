# Precursor application image (web, worker, beat and migrate services of compose.yaml).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY webapp ./webapp
COPY telemetry ./telemetry
COPY investigations ./investigations
COPY templates ./templates
COPY manage.py ./
# gcc builds the compiled remote-write scanner (telemetry/ingestion/_rwscan.c), then goes.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && cd / && python -c "from telemetry.ingestion import _rwscan"
RUN useradd --system --home /var/lib/precursor precursor && mkdir -p /var/lib/precursor && chown precursor /var/lib/precursor
USER precursor
EXPOSE 8000
CMD ["gunicorn", "webapp.wsgi:application", "--bind", "0.0.0.0:8000"]
