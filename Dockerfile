# syntax=docker/dockerfile:1
# The dashboard as a container:  docker build -t gpu-mem . && docker run -p 8501:8501 gpu-mem
#
# Base pinned by digest. python:3.11.16-slim-bookworm, the multi-platform index digest that docker-library/repo-info
# records (repos/python/remote/3.11.16-slim-bookworm.md, build of 2026-09-01; its linux/amd64 image is
# python@sha256:b1add8a6f2aca6bcfcf0b9c9b522352f7ce0d62a3d556a2f2f32511aa0cca250). It could not be re-resolved
# against Docker Hub from the machines this was written on (no registry access): `docker buildx imagetools inspect
# python:3.11.16-slim-bookworm` shows the digest to move to when the base is updated.
FROM python:3.11.16-slim-bookworm@sha256:c425d915a89a6dcd3183b1797ad9bd8878caff5a417f6371c8df93c8ea8b727f

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STREAMLIT_SERVER_HEADLESS=true \
    STREAMLIT_SERVER_FILE_WATCHER_TYPE=none \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_CLIENT_TOOLBAR_MODE=viewer

WORKDIR /app

# tini (Debian's) runs as PID 1: it forwards SIGTERM to Streamlit and reaps any orphan (the app starts no child
# process: the PDF report is pure Python, no browser). The runtime user has a fixed numeric UID, so
# orchestrators can verify runAsNonRoot (hadolint DL3066), and a home for the Hub cache (~/.cache/llm-gpu-mem).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 --shell /usr/sbin/nologin app

# Dependencies first: this layer is reused until requirements.txt changes.
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .

# The caching allocator's C replay (calculator/allocator/native/allocator.c), compiled here and the compiler removed in the same
# layer. libc6-dev is left unpinned: it must match the base image's libc6, which Debian's security updates move.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc=4:12.2.0-3 libc6-dev \
 && python -m calculator.allocator.native \
 && apt-get purge -y --auto-remove gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

# The code belongs to root and the runtime user can only read it: files 0644, directories 0755.
RUN find /app -type d -exec chmod 0755 {} + \
 && find /app -type f -exec chmod 0644 {} +
USER 10001:10001

EXPOSE 8501
# python:*-slim has no curl: probe Streamlit's health endpoint with the standard library.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys,urllib.request as u; sys.exit(0 if u.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read() == b'ok' else 1)"]

ENTRYPOINT ["/usr/bin/tini", "--", "streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0"]
