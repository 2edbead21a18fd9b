# One image for every pyk8s process; the compose service picks the module to run.
FROM python:3.11-slim-bookworm
WORKDIR /opt/pyk8s
# pyk8s.Dockerfile.dockerignore (BuildKit) keeps .venv, state and tests out of the context.
COPY . .
RUN pip install --no-cache-dir .
