# syntax=docker/dockerfile:1
# The dashboard as a container: docker build -t gpu-mem . && docker run --init -p 8501:8501 gpu-mem
# (--init reaps the headless Chromium children kaleido starts for the PDF chart, if chromium is installed.)
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STREAMLIT_SERVER_HEADLESS=true \
    STREAMLIT_SERVER_FILE_WATCHER_TYPE=none \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    STREAMLIT_CLIENT_TOOLBAR_MODE=viewer

WORKDIR /app

# Fixed numeric UID so orchestrators can verify runAsNonRoot (hadolint DL3066).
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin app

# Dependencies first: this layer is reused until requirements.txt changes.
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY --chown=10001:10001 . .
USER 10001:10001

EXPOSE 8501
# python:*-slim has no curl: probe Streamlit's health endpoint with the standard library.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys,urllib.request as u; sys.exit(0 if u.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read() == b'ok' else 1)"]

ENTRYPOINT ["streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0"]
