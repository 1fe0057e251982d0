# Precursor application image (web, worker, beat and migrate services of compose.yaml).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webapp ./webapp
COPY telemetry ./telemetry
COPY investigations ./investigations
COPY templates ./templates
COPY manage.py ./
RUN pip install --no-cache-dir .
RUN useradd --system --home /var/lib/precursor precursor && mkdir -p /var/lib/precursor && chown precursor /var/lib/precursor
USER precursor
EXPOSE 8000
CMD ["gunicorn", "webapp.wsgi:application", "--bind", "0.0.0.0:8000"]
