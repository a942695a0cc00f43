# callgate: the dashboard and the demo traffic for the scale-out deployment (docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY guard ./guard
COPY telemetry ./telemetry
COPY analytics ./analytics
COPY dashboards ./dashboards
COPY callgate ./callgate
# the dashboard over ClickHouse and the demo's traffic over OTLP/gRPC to the collector
RUN pip install ".[demo,clickhouse,otlp-grpc]"

RUN useradd --create-home --uid 10001 callgate
USER callgate
EXPOSE 8501
CMD ["callgate", "--help"]
